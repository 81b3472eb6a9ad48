package framedict

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/internal/stacknames"
)

func TestIDsAndForget(t *testing.T) {
	d := New()
	a, isNew := d.ID("main")
	if a != 1 || !isNew {
		t.Fatalf("first ID = %d, new %v; want 1, true", a, isNew)
	}
	if again, isNew := d.ID("main"); again != a || isNew {
		t.Fatalf("repeat ID = %d, new %v", again, isNew)
	}
	b, _ := d.ID("run")
	d.Forget([]string{"main"})
	if d.Len() != 1 {
		t.Fatalf("%d frames known after forgetting one of two, want 1", d.Len())
	}
	// A forgotten frame that comes back is new to the file: it is stored
	// again, with the lowest free ID (its old one here).
	if c, isNew := d.ID("main"); !isNew || c != a || c == b {
		t.Fatalf("forgotten frame back: ID %d, new %v; want %d, true", c, isNew, a)
	}
}

// Frames retention removed give their IDs to new frames, lowest first;
// IDs freed at the top bring the next new ID down.
func TestFreedIDsAreReused(t *testing.T) {
	d := New()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		d.ID(n)
	}
	d.MarkUntyped(3)
	d.Forget([]string{"d", "b", "c", "nothing"})
	for _, want := range []struct {
		name string
		id   int32
	}{{"x", 2}, {"y", 3}, {"z", 4}, {"w", 6}} {
		if id, isNew := d.ID(want.name); id != want.id || !isNew {
			t.Fatalf("%s: ID %d, new %v; want %d, true", want.name, id, isNew, want.id)
		}
	}
	if d.Fill(3) {
		t.Fatal("a reused ID kept the untyped mark of the frame it belonged to")
	}
	d.Forget([]string{"w", "e", "z"})
	if id, _ := d.ID("v"); id != 4 {
		t.Fatalf("after the top three were freed: ID %d, want 4", id)
	}
	if id, _ := d.ID("u"); id != 5 {
		t.Fatalf("next: ID %d, want 5", id)
	}
}

// A file's gaps (frames removed before a restart) are free after Load.
func TestLoadFreesGaps(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE f (frame_id INTEGER, frame_name VARCHAR, frame_type VARCHAR, file_name VARCHAR);
INSERT INTO f VALUES (7, 'g', 'native', NULL), (2, 'b', 'native', NULL), (3, 'c', NULL, NULL), (9, 'i', 'native', NULL)`); err != nil {
		t.Fatal(err)
	}
	d, err := Load(context.Background(), db, "f")
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for _, n := range []string{"b", "n1", "n2", "n3", "n4", "n5", "n6", "n7"} {
		id, _ := d.ID(n)
		got = append(got, id)
	}
	if want := []int32{2, 1, 4, 5, 6, 8, 10, 11}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("IDs %v, want %v", got, want)
	}
	if !d.Fill(3) {
		t.Fatal("untyped frame 3 not fillable after Load")
	}
}

// Forgotten stacks get new IDs when they come back; the others keep theirs.
func TestStackDictForget(t *testing.T) {
	d := NewStacks()
	keys := []StackKey{KeyOf([]string{"main"}), KeyOf([]string{"main", "run"}), KeyOf([]string{"main", "run", "leaf"})}
	var ids []int32
	for i, k := range keys {
		id, isNew := d.ID(k)
		if id != int32(i+1) || !isNew {
			t.Fatalf("stack %d: ID %d, new %v; want %d, true", i, id, isNew, i+1)
		}
		ids = append(ids, id)
	}
	d.Forget(nil)
	d.Forget([]int32{ids[0], ids[2], 99})
	if d.Len() != 1 {
		t.Fatalf("%d stacks known after forgetting two of three, want 1", d.Len())
	}
	if id, isNew := d.ID(keys[1]); id != ids[1] || isNew {
		t.Fatalf("kept stack: ID %d, new %v; want %d, false", id, isNew, ids[1])
	}
	if id, isNew := d.ID(keys[0]); id != 4 || !isNew {
		t.Fatalf("forgotten stack: ID %d, new %v; want 4 (never reused), true", id, isNew)
	}
}

// An untyped frame is filled once; a typed one never.
func TestFillOnce(t *testing.T) {
	d := New()
	id, _ := d.ID("main")
	typed, _ := d.ID("run")
	d.MarkUntyped(id)
	if d.Fill(typed) {
		t.Fatal("typed frame fillable")
	}
	if !d.Fill(id) {
		t.Fatal("untyped frame not fillable")
	}
	if d.Fill(id) {
		t.Fatal("frame filled twice")
	}
}

// Stack keys tell apart every difference a frame list can have: order,
// length, where names split, and a hundred thousand random lists.
func TestStackKeyDistinguishesFrameLists(t *testing.T) {
	cases := [][]string{
		{"a", "b"}, {"b", "a"}, {"a"}, {"a", ""}, {"", "a"}, {"ab", "c"}, {"a", "bc"},
		{"a", "b", "a", "b"}, {"a", "b", "b", "a"}, {}, {""},
	}
	seen := map[StackKey][]string{}
	for _, c := range cases {
		k := KeyOf(c)
		if k.IsZero() {
			t.Fatalf("KeyOf(%q) is the zero key", c)
		}
		if prev, ok := seen[k]; ok {
			t.Fatalf("KeyOf(%q) == KeyOf(%q)", c, prev)
		}
		seen[k] = c
		if again := KeyOf(append([]string(nil), c...)); again != k {
			t.Fatalf("KeyOf(%q) changed between calls", c)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("pkg%d.Func%d", i%20, i)
	}
	keys := map[StackKey]string{}
	for range 100_000 {
		frames := make([]string, 1+r.IntN(30))
		for j := range frames {
			frames[j] = names[r.IntN(len(names))]
		}
		joined := strings.Join(frames, ";")
		k := KeyOf(frames)
		if prev, ok := keys[k]; ok && prev != joined {
			t.Fatalf("collision: %q and %q", prev, joined)
		}
		keys[k] = joined
	}
}

// The hasher fed name keys gives KeyOf's key: the converter hashes names
// once and builds stacks from them, the writer and the loader use KeyOf.
func TestStackHasherMatchesKeyOf(t *testing.T) {
	frames := []string{"main", "runtime.goexit", "[truncated]", "f_[k]"}
	var h StackHasher
	for _, f := range frames {
		h.Add(NameKeyOf(f))
	}
	if h.Sum() != KeyOf(frames) {
		t.Fatal("StackHasher over NameKeyOf differs from KeyOf")
	}
}

// LoadStacks gives every stored stack the key KeyOf gives its frames'
// names, the converter's key: lists empty, deep, naming a frame twice, and
// naming IDs the frame table does not hold (0, negative, past its end),
// which are "[missing]" as in the queries. With a frame ID far beyond the
// others, the frames are kept in a map instead of a slice by ID.
func TestLoadStacksKeysMatchKeyOf(t *testing.T) {
	for _, sparse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sparse=%v", sparse), func(t *testing.T) {
			db, err := sql.Open("duckdb", "")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			names := map[int32]string{1: "main", 2: "a b", 3: "f [k]", 4: "", 7: "x;y", 12: "1 2"}
			deep := make([]int32, 1024)
			for i := range deep {
				deep[i] = int32(1 + i%12)
			}
			stacks := map[int32][]int32{
				1: {}, 2: {1}, 3: {1, 2, 3}, 4: {3, 2, 1}, 5: {1, 1}, 6: {4}, 7: {0, 1},
				8: {-3}, 9: {999, 12}, 10: {5, 2}, 11: deep, 40: {7, 12, 2},
			}
			if sparse {
				names[2_000_000_000] = "far"
				stacks[41] = []int32{2_000_000_000, 1}
			}
			for _, q := range []string{
				"CREATE TABLE frames (frame_id INTEGER PRIMARY KEY, frame_name VARCHAR NOT NULL, frame_type VARCHAR, file_name VARCHAR)",
				"CREATE TABLE stacks (stack_id INTEGER NOT NULL, stack_frame_ids INTEGER[] NOT NULL)",
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			for id, name := range names {
				if _, err := db.ExecContext(ctx, "INSERT INTO frames VALUES (?, ?, NULL, NULL)", id, name); err != nil {
					t.Fatal(err)
				}
			}
			maxID := int32(0)
			for id, frames := range stacks {
				list := make([]string, len(frames))
				for i, f := range frames {
					list[i] = fmt.Sprint(f)
				}
				if _, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO stacks VALUES (%d, [%s]::INTEGER[])", id, strings.Join(list, ","))); err != nil {
					t.Fatal(err)
				}
				maxID = max(maxID, id)
			}
			fd, err := Load(ctx, db, "frames")
			if err != nil {
				t.Fatal(err)
			}
			d, err := LoadStacks(ctx, db, "stacks", fd)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != len(stacks) {
				t.Fatalf("loaded %d stacks, want %d", d.Len(), len(stacks))
			}
			for id, frames := range stacks {
				named := make([]string, len(frames))
				for i, f := range frames {
					n, ok := names[f]
					if !ok {
						n = stacknames.Missing
					}
					named[i] = n
				}
				got, isNew := d.ID(KeyOf(named))
				if isNew || got != id {
					t.Fatalf("stack %d %v: loaded as %d (new %v)", id, frames, got, isNew)
				}
			}
			if next, _ := d.ID(KeyOf([]string{"never stored"})); next != maxID+1 {
				t.Fatalf("next ID %d, want %d", next, maxID+1)
			}
		})
	}
}

func TestLeadingInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		v    int64
		n    int
		fail bool
	}{
		{"12 7", 12, 3, false}, {"7", 7, 1, false}, {"-3 1", -3, 3, false}, {"0", 0, 1, false},
		{"", 0, 0, true}, {"-", 0, 0, true}, {" 1", 0, 0, true}, {"1,2", 0, 0, true}, {"99999999999999999999", 0, 0, true},
	} {
		v, n, ok := leadingInt([]byte(c.in))
		if ok == c.fail || ok && (v != c.v || n != c.n) {
			t.Errorf("leadingInt(%q) = %d, %d, %v", c.in, v, n, ok)
		}
	}
}
