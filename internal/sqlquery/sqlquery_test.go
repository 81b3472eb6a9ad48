package sqlquery

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

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

// TestBodyIsTheResultsJSON: the endpoint's body (RunBody, WriteTo) is byte
// for byte the JSON of Run's Result, for every kind of value the encoder
// meets (quotes, HTML characters, non-ASCII, NULL, lists, structs, maps,
// UUID, BLOB, times, large and floating numbers), for no rows, and when
// the row or byte limit truncates; and Client's decoding reads it back.
func TestBodyIsTheResultsJSON(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const values = `SELECT i, 'a "quoted" <b>&amp;</b> \ é ✓ ' || i AS s, NULL AS n, [i, NULL, 3] AS l, {'k': i, 'v': 'x'} AS st,
	MAP {'a': i} AS m, '87d205562df99bf6957bc1c0aa118434'::UUID AS u, unhex('00ff41') AS b,
	TIMESTAMP '2026-11-27 14:05:00.123456' AS ts, 170141183460469231731687303715884105727::HUGEINT AS h, i / 3 AS d, i % 2 = 0 AS bo
	FROM range(5) r(i)`
	for _, c := range []struct {
		name string
		stmt string
		lim  Limits
	}{
		{"values", values, DefaultLimits},
		{"no rows", values + " WHERE false", DefaultLimits},
		{"row limit", values, Limits{MaxRows: 2}},
		{"byte limit", values, Limits{MaxBytes: 600}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(context.Background(), db, c.stmt, c.lim)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(res); err != nil {
				t.Fatal(err)
			}
			b, err := RunBody(context.Background(), db, c.stmt, c.lim)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			n, err := b.WriteTo(&got)
			if err != nil || n != int64(got.Len()) {
				t.Fatalf("WriteTo: %d bytes of %d, %v", n, got.Len(), err)
			}
			if got.String() != want.String() {
				t.Fatalf("body:\n%s\nResult's JSON:\n%s", got.String(), want.String())
			}
			if (c.name == "row limit" || c.name == "byte limit") != (res.Truncated != "") || (c.name == "values") != (len(res.Rows) == 5) {
				t.Fatalf("%d rows, truncated %q", len(res.Rows), res.Truncated)
			}
			var back, again Result
			dec := json.NewDecoder(strings.NewReader(got.String()))
			dec.UseNumber()
			if err := dec.Decode(&back); err != nil {
				t.Fatal(err)
			}
			dec = json.NewDecoder(strings.NewReader(want.String()))
			dec.UseNumber()
			if err := dec.Decode(&again); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, again) {
				t.Fatalf("decoded body %+v, decoded Result %+v", back, again)
			}
		})
	}
}

// TestOnThisMachine: a file here can only be held by a collector here, so
// only endpoints of this machine are asked which file they serve.
func TestOnThisMachine(t *testing.T) {
	for ep, want := range map[string]bool{
		"127.0.0.1:7073": true, "localhost:7072": true, "[::1]:7072": true, ":7072": true, "0.0.0.0:7073": true,
		"192.0.2.10:7073": false, "gateway.example:7073": false, "127.0.0.1": false,
	} {
		if got := onThisMachine(ep); got != want {
			t.Errorf("onThisMachine(%q) = %v, want %v", ep, got, want)
		}
	}
}

// A COMMIT that ran out of memory is out of memory, though DuckDB's
// "Failed to commit" error does not say so in its type (messages as DuckDB
// 1.5.4 gave them in the writer's tests); one that could not write the log
// is not. The writer opens its file again after the first kind only.
func TestOutOfMemoryTellsCommitFailures(t *testing.T) {
	for msg, want := range map[string]bool{
		"TransactionContext Error: Failed to commit: could not allocate block of size 4.0 KiB (965.8 MiB/953.6 MiB used)": true,
		"TransactionContext Error: Failed to commit: failed to allocate data of size 4.0 KiB (246.6 MiB/244.1 MiB used)":  true,
		"TransactionContext Error: Failed to commit: failed to pin block of size 256.0 KiB (230.3 MiB/244.1 MiB used)":    true,
		`TransactionContext Error: Failed to commit: Could not write file "/tmp/p.duckdb.wal": No space left on device`:   false,
		`TransactionContext Error: Failed to commit: Cannot open file "/tmp/p.duckdb.wal": Operation not permitted`:       false,
	} {
		if got := IsOutOfMemory(errors.New(msg)); got != want {
			t.Errorf("IsOutOfMemory(%q) = %v, want %v", msg, got, want)
		}
	}
}

// Retry-After in seconds or as an HTTP date; absent or unreadable means
// "do not send again", and a zero or past delay still waits a little.
func TestRetryAfter(t *testing.T) {
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for _, c := range []struct {
		header   string
		min, max time.Duration
	}{
		{"", 0, 0},
		{"soon", 0, 0},
		{"1", time.Second, time.Second},
		{"120", 2 * time.Minute, 2 * time.Minute},
		{"0", minRetryWait, minRetryWait},
		{"-5", minRetryWait, minRetryWait},
		{past, minRetryWait, minRetryWait},
		{future, 58 * time.Minute, time.Hour},
	} {
		if got := retryAfter(c.header); got < c.min || got > c.max {
			t.Errorf("retryAfter(%q) = %s, want %s to %s", c.header, got, c.min, c.max)
		}
	}
}
