package pdict

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// TestEqualContentGetsOneIndex asks every table for the same content twice
// and for content that differs in one field: the first gets one index, the
// second a new one, and the tables hold what was asked for.
func TestEqualContentGetsOneIndex(t *testing.T) {
	pd := pprofile.NewProfiles()
	b := New(pd.Dictionary())
	dict := b.Dictionary()
	same := func(what string, a, b int32) {
		t.Helper()
		if a != b || a == 0 {
			t.Errorf("%s: %d then %d, want one non-zero index", what, a, b)
		}
	}
	differ := func(what string, a, b int32) {
		t.Helper()
		if a == b {
			t.Errorf("%s: both %d, want two entries", what, a)
		}
	}

	fn := b.FunctionOf(Func{Name: "hot", SystemName: "_Z3hotv", File: "hot.cc", StartLine: 10})
	same("function", fn, b.FunctionOf(Func{Name: "hot", SystemName: "_Z3hotv", File: "hot.cc", StartLine: 10}))
	differ("function start line", fn, b.FunctionOf(Func{Name: "hot", SystemName: "_Z3hotv", File: "hot.cc", StartLine: 11}))
	same("Function(name, file)", b.Function("main", "m.go"), b.FunctionOf(Func{Name: "main", SystemName: "main", File: "m.go"}))
	if f := dict.FunctionTable().At(int(fn)); dict.StringTable().At(int(f.SystemNameStrindex())) != "_Z3hotv" || f.StartLine() != 10 {
		t.Errorf("function %d holds system name %q, start line %d", fn, dict.StringTable().At(int(f.SystemNameStrindex())), f.StartLine())
	}

	str := b.Attribute("profile.frame.type", "native")
	same("string attribute", str, b.AttributeOf("profile.frame.type", "", pcommon.NewValueStr("native")))
	one := b.AttributeOf("n", "", pcommon.NewValueInt(1))
	same("int attribute", one, b.AttributeOf("n", "", pcommon.NewValueInt(1)))
	differ(`1 and "1"`, one, b.AttributeOf("n", "", pcommon.NewValueStr("1")))
	differ("unit", one, b.AttributeOf("n", "By", pcommon.NewValueInt(1)))
	if a := dict.AttributeTable().At(int(b.AttributeOf("n", "By", pcommon.NewValueInt(1)))); a.Value().Int() != 1 || dict.StringTable().At(int(a.UnitStrindex())) != "By" {
		t.Errorf("attribute with unit holds %v %q", a.Value().AsRaw(), dict.StringTable().At(int(a.UnitStrindex())))
	}

	m := b.MappingOf(0x1000, 0x2000, 0, "/bin/app", []int32{str, one})
	same("mapping", m, b.MappingOf(0x1000, 0x2000, 0, "/bin/app", []int32{str, one}))
	differ("mapping attributes", m, b.MappingOf(0x1000, 0x2000, 0, "/bin/app", []int32{str}))
	same("Mapping(MappingKey)", b.Mapping(MappingKey{Start: 1, Limit: 2, File: "f", Attr: str}), b.MappingOf(1, 2, 0, "f", []int32{str}))

	inlined := []Line{{Function: fn, Line: 12, Column: 3}, {Function: b.Function("main", "m.go"), Line: 40}}
	loc := b.LocationOf(m, 0x1234, inlined, nil)
	same("location", loc, b.LocationOf(m, 0x1234, inlined, nil))
	differ("location column", loc, b.LocationOf(m, 0x1234, []Line{{Function: fn, Line: 12, Column: 4}, inlined[1]}, nil))
	same("Location()", b.Location(m, 0x99, fn, 5, str), b.LocationOf(m, 0x99, []Line{{Function: fn, Line: 5}}, []int32{str}))
	if l := dict.LocationTable().At(int(loc)); l.Lines().Len() != 2 || l.Lines().At(0).Column() != 3 || l.Lines().At(1).Line() != 40 {
		t.Errorf("location %d holds %d lines", loc, l.Lines().Len())
	}

	st := b.Stack([]int32{loc, loc + 1})
	same("stack", st, b.Stack([]int32{loc, loc + 1}))
	differ("stack order", st, b.Stack([]int32{loc + 1, loc}))
	if got := b.Stack(nil); got != 0 {
		t.Errorf("empty stack = %d, want the zero entry", got)
	}
	if got := b.Link([16]byte{}, [8]byte{}); got != 0 {
		t.Errorf("zero link = %d, want the zero entry", got)
	}
	lk := b.Link([16]byte{1}, [8]byte{2})
	same("link", lk, b.Link([16]byte{1}, [8]byte{2}))
}

// TestZeroEntries: a new Builder puts index 0 of every table in place, and
// a dictionary that has them already keeps them.
func TestZeroEntries(t *testing.T) {
	pd := pprofile.NewProfiles()
	New(pd.Dictionary())
	New(pd.Dictionary()) // a second Builder over the same tables
	d := pd.Dictionary()
	for name, n := range map[string]int{
		"string": d.StringTable().Len(), "function": d.FunctionTable().Len(), "mapping": d.MappingTable().Len(),
		"location": d.LocationTable().Len(), "stack": d.StackTable().Len(), "link": d.LinkTable().Len(), "attribute": d.AttributeTable().Len(),
	} {
		if n != 1 {
			t.Errorf("%s table has %d entries, want the zero entry only", name, n)
		}
	}
}
