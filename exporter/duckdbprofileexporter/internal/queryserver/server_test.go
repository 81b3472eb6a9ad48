package queryserver

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// While the writer opens the file again (db() is nil), a query is refused
// with 503, Retry-After and a sentence saying why, not a crash or a 400.
func TestQueryWhileTheFileIsReopenedIsRefusedWith503(t *testing.T) {
	endpoint := localendpoint.NewServerConfig("127.0.0.1:0")
	srv, err := Start(context.Background(), &endpoint, componenttest.NewNopHost(), componenttest.NewNopTelemetrySettings(),
		Config{MaxConcurrent: 1, MemoryLimit: "64MB"}, func() *sql.DB { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	body, _ := json.Marshal(sqlquery.Request{SQL: "SELECT 1"})
	resp, err := http.Post("http://"+srv.Addr()+sqlquery.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb sqlquery.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != retryAfter ||
		!strings.Contains(eb.Error, "being opened again after a failed write") {
		t.Fatalf("got %s, Retry-After %q, %q; want 503, Retry-After %s and the reason", resp.Status, resp.Header.Get("Retry-After"), eb.Error, retryAfter)
	}
	if srv.Running() != 0 {
		t.Fatalf("%d queries still counted as running", srv.Running())
	}
}
