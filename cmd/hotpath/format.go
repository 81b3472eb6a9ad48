package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

func write(w io.Writer, res *sqlquery.Result, format string, header bool) error {
	switch format {
	case "json":
		return writeJSON(w, res)
	case "csv":
		return writeCSV(w, res, header)
	default:
		return writeTable(w, res, header)
	}
}

// cell renders a value for text output: NULL for nil, lists as [a, b].
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

func writeCSV(w io.Writer, res *sqlquery.Result, header bool) error {
	cw := csv.NewWriter(w)
	if header {
		if err := cw.Write(res.Columns); err != nil {
			return err
		}
	}
	rec := make([]string, len(res.Columns))
	for _, r := range res.Rows {
		for i, v := range r {
			if v == nil {
				rec[i] = ""
			} else {
				rec[i] = cell(v)
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeJSON writes an array with one object per row.
func writeJSON(w io.Writer, res *sqlquery.Result) error {
	out := make([]map[string]any, len(res.Rows))
	for i, r := range res.Rows {
		obj := make(map[string]any, len(r))
		for j, v := range r {
			obj[res.Columns[j]] = v
		}
		out[i] = obj
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeTable aligns columns; numbers are right-aligned, long cells are cut
// so one wide stack does not wrap every line.
func writeTable(w io.Writer, res *sqlquery.Result, header bool) error {
	const maxWidth = 120
	cells := make([][]string, len(res.Rows))
	widths := make([]int, len(res.Columns))
	if header {
		for i, c := range res.Columns {
			widths[i] = utf8.RuneCountInString(c)
		}
	}
	numeric := make([]bool, len(res.Columns))
	for i, t := range res.Types {
		switch strings.ToUpper(t) {
		case "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE", "DECIMAL":
			numeric[i] = true
		}
	}
	for r, row := range res.Rows {
		cells[r] = make([]string, len(row))
		for i, v := range row {
			s := cell(v)
			if utf8.RuneCountInString(s) > maxWidth {
				s = string([]rune(s)[:maxWidth-1]) + "…"
			}
			cells[r][i] = s
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	line := func(vals []string, isHeader bool) error {
		var sb strings.Builder
		for i, v := range vals {
			if i > 0 {
				sb.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(v))
			if numeric[i] && !isHeader {
				sb.WriteString(pad + v)
			} else if i == len(vals)-1 {
				sb.WriteString(v)
			} else {
				sb.WriteString(v + pad)
			}
		}
		sb.WriteString("\n")
		_, err := io.WriteString(w, sb.String())
		return err
	}
	if header {
		if err := line(res.Columns, true); err != nil {
			return err
		}
		rule := make([]string, len(widths))
		for i, n := range widths {
			rule[i] = strings.Repeat("-", n)
		}
		if err := line(rule, true); err != nil {
			return err
		}
	}
	for _, r := range cells {
		if err := line(r, false); err != nil {
			return err
		}
	}
	return nil
}
