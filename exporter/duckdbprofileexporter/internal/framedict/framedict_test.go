package framedict

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestIDsRollbackAndForget(t *testing.T) {
	d := New()
	a, isNew := d.ID("main")
	if a != 1 || !isNew {
		t.Fatalf("first ID = %d, new %v; want 1, true", a, isNew)
	}
	if again, isNew := d.ID("main"); again != a || isNew {
		t.Fatalf("repeat ID = %d, new %v", again, isNew)
	}
	d.Commit()
	b, _ := d.ID("pending")
	d.Rollback()
	if d.Len() != 1 {
		t.Fatalf("rollback kept %d frames", d.Len())
	}
	// IDs are not reused after a rollback, so a half-written batch cannot
	// alias a new frame.
	if c, _ := d.ID("pending"); c == b {
		t.Fatalf("ID %d reused after rollback", c)
	}
	d.Forget([]string{"main"})
	if _, isNew := d.ID("main"); !isNew {
		t.Fatal("forgotten frame still known")
	}
}

// A frame filled in a batch that failed is untyped again; one filled in a
// committed batch is not filled twice.
func TestFillRollsBackWithTheBatch(t *testing.T) {
	d := New()
	id, _ := d.ID("main")
	d.MarkUntyped(id)
	d.Commit()
	if !d.Fill(id) {
		t.Fatal("untyped frame not fillable")
	}
	if d.Fill(id) {
		t.Fatal("frame filled twice in one batch")
	}
	d.Rollback()
	if !d.Fill(id) {
		t.Fatal("frame of a failed batch's fill is not untyped again")
	}
	d.Commit()
	if d.Fill(id) {
		t.Fatal("committed fill filled again")
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
