package python

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Debian's interpreter: stripped (.dynsym only), non-PIE, statically
// linked with libpython.
const debianPython = "/usr/bin/python3.11"

func TestInspectDebianPython(t *testing.T) {
	f, err := elf.Open(debianPython)
	if err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	defer f.Close()
	in, err := Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	if in.Major != 3 || in.Minor != 11 || in.RuntimeVA == 0 || in.CodeTypeVA == 0 {
		t.Fatalf("inspected %+v", in)
	}
	t.Logf("%s: _PyRuntime at %#x", in, in.RuntimeVA)
	// Non-PIE: the text segment is mapped where the ELF says.
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			if bias, ok := in.Bias(p.Vaddr&^0xfff, p.Off&^0xfff); !ok || bias != 0 {
				t.Errorf("bias of the text segment at its own address = %#x, %v; want 0", bias, ok)
			}
			if bias, ok := in.Bias(0x7f0000000000+p.Vaddr&^0xfff, p.Off&^0xfff); !ok || bias != 0x7f0000000000 {
				t.Errorf("bias = %#x, %v; want 0x7f0000000000", bias, ok)
			}
		}
	}
}

// A CPython whose version is not in the table is refused with
// ErrUnknownVersion (the agent then keeps it native-only), never walked
// with another version's offsets.
func TestInspectUnknownVersion(t *testing.T) {
	f, err := elf.Open(debianPython)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := knownOffsets
	knownOffsets = map[[2]int]Offsets{{3, 13}: saved[[2]int{3, 11}]}
	defer func() { knownOffsets = saved }()
	if in, err := Inspect(f); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("Inspect = %v, %v; want ErrUnknownVersion", in, err)
	}
	// Not an interpreter at all.
	self, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if _, err := Inspect(self); !errors.Is(err, ErrNotPython) {
		t.Errorf("Inspect(test binary) = %v, want ErrNotPython", err)
	}
}

// TestOffsetsMatchDWARF checks the table against the debug info of CPython
// builds of each version (pyenv builds keep -g; Debian's own interpreter is
// stripped, and its -dbg package is a different build).
func TestOffsetsMatchDWARF(t *testing.T) {
	home, _ := os.UserHomeDir()
	checked := 0
	for version := range knownOffsets {
		minor := fmt.Sprintf("%d.%d", version[0], version[1])
		// 3.7's library is libpython3.7m (pymalloc's ABI flag).
		libs, _ := filepath.Glob(filepath.Join(home, ".pyenv/versions/"+minor+".*/lib/libpython"+minor+"*.so.1.0"))
		if len(libs) == 0 {
			t.Logf("no CPython %s build with debug info here (pyenv)", minor)
			continue
		}
		checked++
		t.Run(minor, func(t *testing.T) { checkOffsets(t, libs[0], knownOffsets[version]) })
	}
	if checked == 0 {
		t.Skip("no CPython build with debug info here; TestPython311FramesWithoutHelp checks the 3.11 offsets against Debian's interpreter")
	}
}

func checkOffsets(t *testing.T, lib string, o Offsets) {
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	type member struct {
		path []string
		want uint16
	}
	members := []member{
		{[]string{"pyruntimestate", "interpreters", "head"}, o.RuntimeInterpHead},
		{[]string{"_ts", "next"}, o.TStateNext},
		{[]string{"_ts", "thread_id"}, o.TStateThreadID},
		{[]string{"_object", "ob_type"}, o.ObjectType},
		{[]string{"PyVarObject", "ob_size"}, o.VarObjectSize},
		{[]string{"PyCodeObject", "co_firstlineno"}, o.CodeFirstLineNo},
		{[]string{"PyCodeObject", "co_filename"}, o.CodeFilename},
		{[]string{"PyBytesObject", "ob_sval"}, o.BytesData},
		{[]string{"PyASCIIObject", "length"}, o.UnicodeLength},
		{[]string{"PyASCIIObject", "state"}, o.UnicodeState},
	}
	switch o.Frames {
	case InterpreterFrames:
		members = append(members, []member{
			{[]string{"_is", "threads", "head"}, o.InterpThreadsHead},
			{[]string{"_ts", "cframe"}, o.TStateCFrame},
			{[]string{"_PyCFrame", "current_frame"}, o.CFrameCurrentFrame},
			{[]string{"_PyInterpreterFrame", "f_code"}, o.FrameCode},
			{[]string{"_PyInterpreterFrame", "previous"}, o.FramePrevious},
			{[]string{"_PyInterpreterFrame", "prev_instr"}, o.FramePrevInstr},
			{[]string{"_PyInterpreterFrame", "owner"}, o.FrameOwner},
			{[]string{"PyCodeObject", "co_qualname"}, o.CodeQualName},
			{[]string{"PyCodeObject", "co_linetable"}, o.CodeLineTable},
			{[]string{"PyCodeObject", "co_code_adaptive"}, o.CodeAdaptive},
		}...)
	default:
		table := "co_linetable"
		if o.Frames == FrameObjects {
			table = "co_lnotab"
		}
		if !o.NoCFrame {
			t.Errorf("%s: a PyFrameObject layout must take the thread state's frame itself (NoCFrame)", lib)
		}
		members = append(members, []member{
			{[]string{"_is", "tstate_head"}, o.InterpThreadsHead},
			{[]string{"_ts", "frame"}, o.TStateCFrame},
			{[]string{"_frame", "f_code"}, o.FrameCode},
			{[]string{"_frame", "f_back"}, o.FramePrevious},
			{[]string{"_frame", "f_lasti"}, o.FramePrevInstr},
			{[]string{"PyCodeObject", "co_name"}, o.CodeQualName},
			{[]string{"PyCodeObject", table}, o.CodeLineTable},
		}...)
		// f_lasti is an int the kernel reads as the low half of a word.
		if st, err := dwarfStruct(d, "_frame"); err == nil {
			for _, f := range st.Field {
				if f.Name == "f_lasti" && f.Type.Size() != 4 {
					t.Errorf("%s: f_lasti is %d bytes, the walk reads an int", lib, f.Type.Size())
				}
			}
		}
		if o.FramePrevInstr%8 != 0 {
			t.Errorf("f_lasti at %d does not start a word", o.FramePrevInstr)
		}
	}
	if o.HasIsEntry {
		members = append(members, member{[]string{"_PyInterpreterFrame", "is_entry"}, o.FrameIsEntry})
	} else if _, err := dwarfOffset(d, []string{"_PyInterpreterFrame", "is_entry"}); err == nil {
		t.Errorf("%s's frames have is_entry; the table says they do not", lib)
	}
	for _, c := range members {
		got, err := dwarfOffset(d, c.path)
		if err != nil {
			t.Errorf("%v: %v", c.path, err)
			continue
		}
		if got != int64(c.want) {
			t.Errorf("%v = %d in %s, the table says %d", c.path, got, lib, c.want)
		}
	}
	for name, want := range map[string]uint16{"PyASCIIObject": o.UnicodeASCIIData, "PyCompactUnicodeObject": o.UnicodeData} {
		st, err := dwarfStruct(d, name)
		if err != nil || st.ByteSize != int64(want) {
			t.Errorf("sizeof(%s) = %v (%v), the table says %d", name, st, err, want)
		}
	}
}

// dwarfOffset is the byte offset of path[1:] (nested members) in struct
// path[0].
func dwarfOffset(d *dwarf.Data, path []string) (int64, error) {
	st, err := dwarfStruct(d, path[0])
	if err != nil {
		return 0, err
	}
	var off int64
	for _, member := range path[1:] {
		var found *dwarf.StructField
		for _, f := range st.Field {
			if f.Name == member {
				found = f
			}
		}
		if found == nil {
			return 0, errors.New("no member " + member)
		}
		off += found.ByteOffset
		if inner, ok := found.Type.(*dwarf.StructType); ok {
			st = inner
		}
	}
	return off, nil
}

// dwarfStruct finds the complete struct named (or typedef'd as) name.
func dwarfStruct(d *dwarf.Data, name string) (*dwarf.StructType, error) {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			return nil, errors.New("no struct " + name)
		}
		if e.Tag != dwarf.TagStructType && e.Tag != dwarf.TagTypedef {
			continue
		}
		if n, _ := e.Val(dwarf.AttrName).(string); n != name {
			continue
		}
		typ, err := d.Type(e.Offset)
		if err != nil {
			continue
		}
		for {
			td, ok := typ.(*dwarf.TypedefType)
			if !ok {
				break
			}
			typ = td.Type
		}
		if st, ok := typ.(*dwarf.StructType); ok && !st.Incomplete {
			return st, nil
		}
	}
}

// Location tables as CPython 3.11 writes them (hand-assembled entries of
// each form).
func TestLineOf(t *testing.T) {
	table := []byte{
		0x80 | 13<<3 | 1, 2, // no-column form, 2 units, line +1 → 11
		0x80 | 0<<3, 0x11, // short form, 1 unit, same line → 11
		0x80 | 12<<3 | 2, 4, 9, // one-line form, 3 units, line +2 → 13
		0x80 | 15<<3,                 // no location, 1 unit
		0x80 | 14<<3 | 3, 3, 0, 1, 1, // long form, 4 units, line -1 → 12
		0x80 | 13<<3, 0x40, 0x01, // no-column, 1 unit, svarint 64 (0 | 1<<6) = +32 → 44
	}
	for idx, want := range map[int]int{0: 11, 1: 11, 2: 11, 3: 13, 5: 13, 7: 12, 10: 12, 11: 44} {
		if got, ok := lineOf(table, 10, idx); !ok || got != want {
			t.Errorf("lineOf(%d) = %d, %v; want %d", idx, got, ok, want)
		}
	}
	if _, ok := lineOf(table, 10, 6); ok {
		t.Error("an instruction without location got a line")
	}
	if _, ok := lineOf(table, 10, 12); ok {
		t.Error("an instruction past the table got a line")
	}
	if _, ok := lineOf([]byte{0x01, 0x02}, 10, 0); ok {
		t.Error("a malformed table gave a line")
	}
}
