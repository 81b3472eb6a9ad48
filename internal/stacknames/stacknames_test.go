package stacknames

import (
	"database/sql"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// TestDecode names frames in stored order, keeps repeated frames
// (recursion), names IDs the dictionary does not hold [missing] (past its
// end, in a gap, zero, negative; a row with ID 0 is not a frame), and gives
// an empty stack an empty list. Names, which the CLI decodes with in Go,
// names every stack as the SQL does from the text ListSQL sends it, and
// says which stacks hold a frame the dictionary lacks.
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
		`INSERT INTO stacks VALUES (10, [1, 2, 4]), (11, [1, 2, 2, 2, 4]), (12, [1, 99]), (13, []), (14, [4, 2, 1]), (15, [1, 3]), (16, [0, -1, 2]), (17, [1, NULL, 4])`,
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
		17: "main;" + m + ";leaf",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded stacks:\n got %v\nwant %v", got, want)
	}

	var names Names
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
		names.Set(id, name)
	}
	srows, err := db.Query(`SELECT stack_id, ` + ListSQL("stack_frame_ids") + ` FROM stacks`)
	if err != nil {
		t.Fatal(err)
	}
	defer srows.Close()
	inGo := map[int]string{}
	var incomplete []int
	for srows.Next() {
		var id int
		var ids string
		if err := srows.Scan(&id, &ids); err != nil {
			t.Fatal(err)
		}
		frames, complete, err := names.AppendList(nil, ids)
		if err != nil {
			t.Fatalf("stack %d (%q): %v", id, ids, err)
		}
		inGo[id] = strings.Join(frames, ";")
		if !complete {
			incomplete = append(incomplete, id)
		}
	}
	if !reflect.DeepEqual(inGo, want) {
		t.Fatalf("stacks named by Names:\n got %v\nwant %v", inGo, want)
	}
	slices.Sort(incomplete)
	if want := []int{12, 15, 16, 17}; !slices.Equal(incomplete, want) {
		t.Fatalf("stacks with a frame the dictionary lacks: %v, want %v", incomplete, want)
	}
}

// TestAppendListRefusesWhatListSQLDoesNotWrite: text that is not IDs separated
// by single spaces is an error, not a stack of fewer or other frames.
func TestAppendListRefusesWhatListSQLDoesNotWrite(t *testing.T) {
	var names Names
	names.Set(1, "main")
	names.Set(2, "run")
	for _, bad := range []string{"1,2", "1  2", " 1 2", "1 2 ", "1 x", "[1, 2]", "1 99999999999999999999"} {
		if frames, _, err := names.AppendList(nil, bad); err == nil {
			t.Errorf("AppendList(%q) = %q, want an error", bad, frames)
		}
	}
	frames, complete, err := names.AppendList([]string{"kept"}, "1 2 1")
	if err != nil || !complete || !slices.Equal(frames, []string{"kept", "main", "run", "main"}) {
		t.Fatalf("AppendList(kept, \"1 2 1\") = %q, %v, %v", frames, complete, err)
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
