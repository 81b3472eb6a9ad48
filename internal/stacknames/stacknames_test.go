package stacknames

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// TestDecode names frames in stored order, keeps repeated frames
// (recursion), names IDs the dictionary does not hold [missing] (past its
// end, in a gap, zero, negative; a row with ID 0 is not a frame), and gives
// an empty stack an empty list. Names, which the CLI decodes with in Go,
// names every stack as the SQL does.
func TestDecode(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		`CREATE TABLE frames (frame_id INTEGER, frame_name VARCHAR)`,
		// 3 was removed by retention: a gap.
		`INSERT INTO frames VALUES (0, 'zero'), (1, 'main'), (2, 'run'), (4, 'leaf'), (5, 'unused')`,
		`CREATE TABLE stacks (stack_id INTEGER, stack_frame_ids INTEGER[])`,
		`INSERT INTO stacks VALUES (10, [1, 2, 4]), (11, [1, 2, 2, 2, 4]), (12, [1, 99]), (13, []), (14, [4, 2, 1]), (15, [1, 3]), (16, [0, -1, 2])`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	q := `WITH dict AS (` + DictSQL("frames") + `)
SELECT stack_id, array_to_string(` + DecodeSQL("stack_frame_ids") + `, ';') FROM stacks, dict ORDER BY stack_id`
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	got := map[int]string{}
	for rows.Next() {
		var id int
		var folded string
		if err := rows.Scan(&id, &folded); err != nil {
			t.Fatal(err)
		}
		got[id] = folded
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	m := Missing
	want := map[int]string{
		10: "main;run;leaf",
		11: "main;run;run;run;leaf",
		12: "main;" + m,
		13: "",
		14: "leaf;run;main",
		15: "main;" + m,
		16: m + ";" + m + ";run",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded stacks:\n got %v\nwant %v", got, want)
	}

	names := Names{}
	frows, err := db.Query(`SELECT frame_id, frame_name FROM frames`)
	if err != nil {
		t.Fatal(err)
	}
	defer frows.Close()
	for frows.Next() {
		var id int64
		var name string
		if err := frows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		names[id] = name
	}
	srows, err := db.Query(`SELECT stack_id, stack_frame_ids FROM stacks`)
	if err != nil {
		t.Fatal(err)
	}
	defer srows.Close()
	inGo := map[int]string{}
	for srows.Next() {
		var id int
		var ids []any
		if err := srows.Scan(&id, &ids); err != nil {
			t.Fatal(err)
		}
		var frames []string
		for _, f := range ids {
			frames = append(frames, names.Of(int64(f.(int32))))
		}
		inGo[id] = strings.Join(frames, ";")
	}
	if !reflect.DeepEqual(inGo, want) {
		t.Fatalf("stacks named by Names:\n got %v\nwant %v", inGo, want)
	}
}

// TestDecodeEmptyDictionary: a file with no frames yet decodes nothing
// without failing.
func TestDecodeEmptyDictionary(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE frames (frame_id INTEGER, frame_name VARCHAR)`); err != nil {
		t.Fatal(err)
	}
	var folded string
	q := `WITH dict AS (` + DictSQL("frames") + `) SELECT array_to_string(` + DecodeSQL("[7]") + `, ';') FROM dict`
	if err := db.QueryRow(q).Scan(&folded); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if folded != Missing {
		t.Fatalf("decoded %q, want %q", folded, Missing)
	}
}
