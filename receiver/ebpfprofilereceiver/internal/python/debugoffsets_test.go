package python

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// python313Lib is a CPython 3.13 build with debug info (pyenv keeps -g), or
// skips.
func python313Lib(t *testing.T) string {
	home, _ := os.UserHomeDir()
	libs, _ := filepath.Glob(filepath.Join(home, ".pyenv/versions/3.13.*/lib/libpython3.13.so.1.0"))
	if len(libs) == 0 {
		t.Skip("no CPython 3.13 build here (pyenv)")
	}
	return libs[0]
}

// TestDebugOffsetsMatchDWARF: a 3.13 has no table entry; its offsets come
// from the _Py_DebugOffsets the build wrote into _PyRuntime, and each one
// (and what is derived from them) is what the build's DWARF says.
func TestDebugOffsetsMatchDWARF(t *testing.T) {
	lib := python313Lib(t)
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	if in.Major != 3 || in.Minor != 13 || !in.Offsets.NoCFrame {
		t.Fatalf("inspected %s with %+v", in, in.Offsets)
	}
	d, err := f.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	o := in.Offsets
	for path, want := range map[[3]string]uint16{
		{"pyruntimestate", "interpreters", "head"}: o.RuntimeInterpHead,
		{"_is", "threads", "head"}:                 o.InterpThreadsHead,
		{"_ts", "next"}:                            o.TStateNext,
		{"_ts", "thread_id"}:                       o.TStateThreadID,
		{"_ts", "current_frame"}:                   o.TStateCFrame,
		{"_PyInterpreterFrame", "f_executable"}:    o.FrameCode,
		{"_PyInterpreterFrame", "previous"}:        o.FramePrevious,
		{"_PyInterpreterFrame", "instr_ptr"}:       o.FramePrevInstr,
		{"_PyInterpreterFrame", "owner"}:           o.FrameOwner,
		{"_object", "ob_type"}:                     o.ObjectType,
		{"PyVarObject", "ob_size"}:                 o.VarObjectSize,
		{"PyCodeObject", "co_firstlineno"}:         o.CodeFirstLineNo,
		{"PyCodeObject", "co_filename"}:            o.CodeFilename,
		{"PyCodeObject", "co_qualname"}:            o.CodeQualName,
		{"PyCodeObject", "co_linetable"}:           o.CodeLineTable,
		{"PyCodeObject", "co_code_adaptive"}:       o.CodeAdaptive,
		{"PyBytesObject", "ob_sval"}:               o.BytesData,
		{"PyASCIIObject", "length"}:                o.UnicodeLength,
		{"PyASCIIObject", "state"}:                 o.UnicodeState,
	} {
		p := path[:]
		if p[2] == "" {
			p = p[:2]
		}
		got, err := dwarfOffset(d, p)
		if err != nil {
			t.Errorf("%v: %v", p, err)
			continue
		}
		if got != int64(want) {
			t.Errorf("%v = %d in %s's DWARF, its _Py_DebugOffsets gave %d", p, got, lib, want)
		}
	}
	for name, want := range map[string]uint16{"PyASCIIObject": o.UnicodeASCIIData, "PyCompactUnicodeObject": o.UnicodeData} {
		st, err := dwarfStruct(d, name)
		if err != nil || st.ByteSize != int64(want) {
			t.Errorf("sizeof(%s) = %v (%v), derived %d", name, st, err, want)
		}
	}
	// The layout read is 3.13's: its size is the struct's.
	if st, err := dwarfStruct(d, "_Py_DebugOffsets"); err != nil || st.ByteSize != int64(debugOffsetsLayouts[13].size) {
		t.Errorf("sizeof(_Py_DebugOffsets) = %v (%v), the reader assumes %d", st, err, debugOffsetsLayouts[13].size)
	}
	// 3.13 removed _PyCFrame: the thread state points at the frame.
	if _, err := dwarfOffset(d, []string{"_PyCFrame", "current_frame"}); err == nil {
		t.Errorf("%s has a _PyCFrame; NoCFrame says it does not", lib)
	}
}

// A _PyRuntime that does not start with the cookie, or whose version
// disagrees with Py_Version, or a version whose layout is not known, is
// refused: the interpreter stays native-only.
func TestDebugOffsetsRefused(t *testing.T) {
	lib := python313Lib(t)
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	version, err := readUint32(f, findSymbol(t, f, "Py_Version"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := debugOffsets(f, in.RuntimeVA, version); err != nil {
		t.Fatalf("the build's own offsets: %v", err)
	}
	if _, err := debugOffsets(f, in.RuntimeVA, version+0x100); err == nil {
		t.Error("a version other than the one _Py_DebugOffsets holds was accepted")
	}
	if _, err := debugOffsets(f, in.RuntimeVA+8, version); err == nil {
		t.Error("data without the cookie was accepted")
	}
	if _, err := debugOffsets(f, in.RuntimeVA, version&^0xff0000|16<<16); err == nil {
		t.Error("3.16, whose layout is not known, was read")
	}
	saved := knownOffsets
	knownOffsets = nil
	defer func() { knownOffsets = saved }()
	if _, err := Inspect(f); err != nil {
		t.Errorf("3.13 needs no table entry: %v", err)
	}
	if old, err := elf.Open(debianPython); err == nil {
		defer old.Close()
		if _, err := Inspect(old); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("3.11 without a table entry: %v, want ErrUnknownVersion (it has no _Py_DebugOffsets)", err)
		}
	}
}

func findSymbol(t *testing.T, f *elf.File, name string) uint64 {
	t.Helper()
	want := map[string]uint64{name: 0}
	findSymbols(f, want)
	if want[name] == 0 {
		t.Fatalf("no symbol %s", name)
	}
	return want[name]
}

// TestDebugOffsetsOfLaterVersions: Debian's CPython 3.14 and 3.15 (the
// roots scripts/cpython-roots.sh makes under $HOTPATH_CPYTHON_ROOTS; make
// test sets it) are read with their versions' layouts, and the offsets
// read are those of the structures as each version's headers define them
// (pycore_interpframe_structs.h, cpython/unicodeobject.h, bytesobject.h,
// worked out by hand): a field of the layout at a wrong place would read
// another field's value.
func TestDebugOffsetsOfLaterVersions(t *testing.T) {
	dir := os.Getenv("HOTPATH_CPYTHON_ROOTS")
	if dir == "" {
		t.Skip("HOTPATH_CPYTHON_ROOTS is not set: make test installs Debian's CPython 3.9, 3.14 and 3.15 there (scripts/cpython-roots.sh)")
	}
	for _, minor := range []int{14, 15} {
		path := filepath.Join(dir, fmt.Sprintf("3.%d/usr/bin/python3.%d", minor, minor))
		f, err := elf.Open(path)
		if err != nil {
			t.Fatalf("scripts/cpython-roots.sh %s installs it: %v", dir, err)
		}
		in, err := Inspect(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		o := in.Offsets
		if in.Minor != minor || !o.NoCFrame {
			t.Errorf("%s: %s, NoCFrame %v", path, in, o.NoCFrame)
		}
		// _PyInterpreterFrame: f_executable, previous, f_funcobj,
		// f_globals, f_builtins, f_locals, frame_obj, instr_ptr,
		// stackpointer (8 bytes each), return_offset (2), owner (1).
		// PyObject: ob_refcnt, ob_type; PyVarObject adds ob_size;
		// PyBytesObject ob_shash then ob_sval; PyASCIIObject: the
		// object header, length, hash, state (4, padded to 8).
		for name, got := range map[string][2]uint16{
			"f_executable": {o.FrameCode, 0}, "previous": {o.FramePrevious, 8},
			"instr_ptr": {o.FramePrevInstr, 56}, "owner": {o.FrameOwner, 74},
			"ob_type": {o.ObjectType, 8}, "ob_size": {o.VarObjectSize, 16}, "ob_sval": {o.BytesData, 32},
			"length": {o.UnicodeLength, 16}, "state": {o.UnicodeState, 32},
			"sizeof(PyASCIIObject)": {o.UnicodeASCIIData, 40}, "sizeof(PyCompactUnicodeObject)": {o.UnicodeData, 56},
		} {
			if got[0] != got[1] {
				t.Errorf("3.%d: %s at %d, the headers put it at %d", minor, name, got[0], got[1])
			}
		}
		// The thread state's and code object's layouts are long; their
		// fields must at least be distinct and inside the structures.
		if o.TStateNext == o.TStateThreadID || o.TStateThreadID == o.TStateCFrame || o.CodeQualName <= o.CodeFilename || o.CodeAdaptive <= o.CodeLineTable {
			t.Errorf("3.%d: implausible offsets %+v", minor, o)
		}
	}
}
