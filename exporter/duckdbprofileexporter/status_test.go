package duckdbprofileexporter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/hotpath-dev/hotpath/internal/statustest"
)

// An exporter that cannot open its file reports a permanent error through
// componentstatus (what health checks show), besides failing Start.
func TestUnopenableFileReportsPermanentError(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "local")
	cfg.Path = filepath.Join(notADir, "agent.duckdb")
	exp, err := NewFactory().CreateProfiles(context.Background(), exportertest.NewNopSettings(NewFactory().Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := statustest.NewHost()
	startErr := exp.Start(context.Background(), host)
	if startErr == nil {
		t.Fatal("Start succeeded on a path below a regular file")
	}
	ev := host.Events()
	if len(ev) != 1 || ev[0].Status() != componentstatus.StatusPermanentError || ev[0].Err() == nil || ev[0].Err().Error() != startErr.Error() {
		t.Fatalf("status events %v, want one permanent error carrying %q", ev, startErr)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
