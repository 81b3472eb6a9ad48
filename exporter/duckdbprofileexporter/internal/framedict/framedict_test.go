package framedict

import "testing"

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
