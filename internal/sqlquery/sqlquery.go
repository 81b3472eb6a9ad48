// Package sqlquery runs people's SQL against a hotpath DuckDB file safely:
// one statement, read-only by DuckDB's own parser, inside a read-only
// transaction, under a timeout and row and byte limits. The exporter's query
// endpoint and `hotpath sql` (on a file no collector holds) share it, and
// Client talks to the endpoint.
package sqlquery

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	// DuckDB keeps the memory it frees between queries.
	_ "github.com/hotpath-dev/hotpath/internal/duckdballoc"
)

// Limits bound one query.
type Limits struct {
	Timeout  time.Duration
	MaxRows  int
	MaxBytes int // JSON size of the rows
}

// DefaultLimits are the exporter's defaults (bytes: RFD 072's 100 MB cap).
var DefaultLimits = Limits{Timeout: 30 * time.Second, MaxRows: 100_000, MaxBytes: 100 << 20}

// Result is a query's answer; it is also the endpoint's JSON body.
type Result struct {
	Columns   []string `json:"columns"`
	Types     []string `json:"types"`
	Rows      [][]any  `json:"rows"`
	Truncated string   `json:"truncated,omitempty"` // why rows stop early, "" when complete
}

// ErrNotReadOnly is returned for statements that are not a single read-only
// query.
var ErrNotReadOnly = errors.New("only a single read-only statement (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE) is allowed")

// DSN is the connection string of a hotpath file. External access (other
// files, extensions) is off: queries see the file and nothing else.
func DSN(path string, readOnly bool) string {
	dsn := path + "?enable_external_access=false"
	if readOnly {
		dsn += "&access_mode=read_only"
	}
	return dsn
}

// Quote makes a SQL string literal. The endpoint takes SQL text only (no
// bind parameters), so values are quoted where the SQL is built.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// OpenReadOnly opens a file no other process holds, for queries only.
func OpenReadOnly(path string) (*sql.DB, func() error, error) {
	c, err := duckdb.NewConnector(DSN(path, true), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s read-only: %w", path, err)
	}
	db := sql.OpenDB(c)
	return db, func() error { return errors.Join(db.Close(), c.Close()) }, nil
}

// Check asks DuckDB's parser whether stmt is exactly one SELECT-like
// statement: json_serialize_sql serialises only SELECT statements (DESCRIBE,
// SHOW and SUMMARIZE parse as such) and reports anything else as an error.
func Check(ctx context.Context, conn *sql.Conn, stmt string) error {
	var raw string
	if err := conn.QueryRowContext(ctx, "SELECT json_serialize_sql($1::VARCHAR)::VARCHAR", stmt).Scan(&raw); err != nil {
		return fmt.Errorf("parse statement: %w", err)
	}
	var parsed struct {
		Error      bool              `json:"error"`
		ErrorType  string            `json:"error_type"`
		Message    string            `json:"error_message"`
		Statements []json.RawMessage `json:"statements"`
	}
	if err := json.Unmarshal([]byte(raw), &parsed); err != nil {
		return fmt.Errorf("parse statement: %w", err)
	}
	switch {
	case parsed.Error && parsed.ErrorType == "parser":
		return fmt.Errorf("syntax error: %s", parsed.Message)
	case parsed.Error:
		return fmt.Errorf("%w: %s", ErrNotReadOnly, parsed.Message)
	case len(parsed.Statements) != 1:
		return fmt.Errorf("%w: got %d statements", ErrNotReadOnly, len(parsed.Statements))
	}
	return nil
}

// Run checks and runs stmt on db within lim.
func Run(ctx context.Context, db *sql.DB, stmt string, lim Limits) (*Result, error) {
	res := &Result{Rows: [][]any{}}
	var err error
	res.Columns, res.Types, res.Truncated, err = run(ctx, db, stmt, lim, func(vals []any, _ []byte) {
		res.Rows = append(res.Rows, vals)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Body is a query's answer as the endpoint sends it: each row kept as the
// JSON it was measured in against MaxBytes, which WriteTo writes as it is.
// Encoding the rows again for the response took a fifth of the server's
// time for a 30-day profile (32 of ~175 ms), and held the rows twice.
type Body struct {
	Columns, Types []string
	Rows           []json.RawMessage
	Truncated      string
}

// RunBody is Run for the endpoint's response.
func RunBody(ctx context.Context, db *sql.DB, stmt string, lim Limits) (*Body, error) {
	b := &Body{}
	var err error
	b.Columns, b.Types, b.Truncated, err = run(ctx, db, stmt, lim, func(_ []any, row []byte) {
		b.Rows = append(b.Rows, row)
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// WriteTo writes b as the JSON document of its Result (json.Encoder's
// bytes, newline included), which Client decodes.
func (b *Body) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	cols, err := json.Marshal(b.Columns)
	if err != nil {
		return 0, err
	}
	types, err := json.Marshal(b.Types)
	if err != nil {
		return 0, err
	}
	n := 0
	write := func(p []byte) {
		k, _ := bw.Write(p) // the first error sticks in bw and Flush returns it
		n += k
	}
	write([]byte(`{"columns":`))
	write(cols)
	write([]byte(`,"types":`))
	write(types)
	write([]byte(`,"rows":[`))
	for i, r := range b.Rows {
		if i > 0 {
			write([]byte{','})
		}
		write(r)
	}
	write([]byte{']'})
	if b.Truncated != "" {
		t, err := json.Marshal(b.Truncated)
		if err != nil {
			return int64(n), err
		}
		write([]byte(`,"truncated":`))
		write(t)
	}
	write([]byte("}\n"))
	return int64(n), bw.Flush()
}

// run checks and runs stmt on db within lim, and hands each row to keep
// as values and as the JSON counted against lim.MaxBytes.
func run(ctx context.Context, db *sql.DB, stmt string, lim Limits, keep func(vals []any, row []byte)) (columns, types []string, truncated string, err error) {
	if lim.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, lim.Timeout)
		defer cancel()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if err := Check(ctx, conn, stmt); err != nil {
		return nil, nil, "", err
	}
	// A read-only transaction is the second guard: even a statement the
	// check let through cannot write.
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION READ ONLY"); err != nil {
		return nil, nil, "", fmt.Errorf("begin read-only transaction: %w", err)
	}
	defer func() {
		// A connection whose ROLLBACK fails (e.g. out of memory) would go
		// back to the pool inside its transaction and fail every later
		// query: returning ErrBadConn from Raw makes database/sql drop it.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	rows, err := conn.QueryContext(ctx, stmt)
	if err != nil {
		return nil, nil, "", wrapTimeout(ctx, err)
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil {
		return nil, nil, "", fmt.Errorf("read columns: %w", err)
	}
	for _, c := range cols {
		columns = append(columns, c.Name())
		types = append(types, c.DatabaseTypeName())
	}
	size, n := 0, 0
	for rows.Next() {
		if lim.MaxRows > 0 && n >= lim.MaxRows {
			truncated = fmt.Sprintf("row limit %d reached", lim.MaxRows)
			break
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, "", fmt.Errorf("read row: %w", err)
		}
		for i := range vals {
			vals[i] = columnValue(types[i], vals[i])
		}
		b, err := json.Marshal(vals)
		if err != nil {
			return nil, nil, "", fmt.Errorf("encode row: %w", err)
		}
		if lim.MaxBytes > 0 && size+len(b) > lim.MaxBytes {
			truncated = fmt.Sprintf("byte limit %d reached", lim.MaxBytes)
			break
		}
		size += len(b)
		n++
		keep(vals, b)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, "", wrapTimeout(ctx, err)
	}
	return columns, types, truncated, nil
}

// IsOutOfMemory reports whether err is DuckDB refusing an allocation beyond
// its memory_limit: for a query, the query, not the input, is too large for
// this process. A COMMIT that ran out of memory counts too: DuckDB's
// "Failed to commit" error keeps the failed allocation's message but not
// its type (the exporter's writer opens its file again after one).
func IsOutOfMemory(err error) bool {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "Failed to commit") && (strings.Contains(msg, "Out of Memory") ||
		strings.Contains(msg, "allocate data of size") || strings.Contains(msg, "allocate block of size") ||
		strings.Contains(msg, "failed to pin block"))
}

func wrapTimeout(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("query timed out: %w", err)
	}
	return fmt.Errorf("query: %w", err)
}

// columnValue is jsonValue, but the driver gives UUID and BLOB values as
// raw bytes: they are written as DuckDB writes them as text (the trace
// tables' trace_id is a UUID), so they can be read and pasted back into a
// query.
func columnValue(typ string, v any) any {
	b, ok := v.([]byte)
	switch {
	case !ok:
		return jsonValue(v)
	case typ == "UUID" && len(b) == 16:
		u := duckdb.UUID(b)
		return u.String()
	case typ == "BLOB":
		return blobText(b)
	}
	return jsonValue(v)
}

// blobText is a BLOB as DuckDB casts it to VARCHAR: printable ASCII as is,
// every other byte (and \, ' and ") as \xHH.
func blobText(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 0x20 && c <= 0x7e && c != '\\' && c != '\'' && c != '"' {
			sb.WriteByte(c)
			continue
		}
		fmt.Fprintf(&sb, "\\x%02X", c)
	}
	return sb.String()
}

// jsonValue turns driver values into what encoding/json writes plainly.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, bool, string, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, int, uint:
		return x
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.999999")
	case []byte:
		return string(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case *big.Int:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}
