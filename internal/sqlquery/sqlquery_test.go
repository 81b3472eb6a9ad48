package sqlquery

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver
)

// UUID and BLOB values come back as the text DuckDB casts them to, not as
// raw bytes: a trace ID can be read and pasted back into a query.
func TestRunWritesUUIDAndBlobAsDuckDBText(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const q = `SELECT '87d205562df99bf6957bc1c0aa118434'::UUID AS u, NULL::UUID AS n, unhex('00ff415c2027227e7f') AS b,
	'87d205562df99bf6957bc1c0aa118434'::UUID::VARCHAR AS u_text, unhex('00ff415c2027227e7f')::VARCHAR AS b_text`
	res, err := Run(context.Background(), db, q, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	row := res.Rows[0]
	if row[0] != "87d20556-2df9-9bf6-957b-c1c0aa118434" || row[0] != row[3] {
		t.Errorf("UUID: %q, DuckDB's text %q", row[0], row[3])
	}
	if row[1] != nil {
		t.Errorf("NULL UUID: %#v", row[1])
	}
	if row[2] != `\x00\xFFA\x5C \x27\x22~\x7F` || row[2] != row[4] {
		t.Errorf("BLOB: %q, DuckDB's text %q", row[2], row[4])
	}
	// The text finds the row again.
	res, err = Run(context.Background(), db, `SELECT count(*) FROM (SELECT '87d205562df99bf6957bc1c0aa118434'::UUID AS u) WHERE u = '`+row[0].(string)+`'`, DefaultLimits)
	if err != nil || res.Rows[0][0] != int64(1) {
		t.Fatalf("lookup by the written UUID: %v %v", res, err)
	}
}
