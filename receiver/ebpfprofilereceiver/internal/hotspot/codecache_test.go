package hotspot

import "testing"

func TestExternalMethodName(t *testing.T) {
	for _, tc := range []struct {
		class, method, descriptor, want string
	}{
		{"Hot", "mix", "(J)J", "long Hot.mix(long)"},
		{"java/util/HashMap", "put", "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;", "java.lang.Object java.util.HashMap.put(java.lang.Object, java.lang.Object)"},
		{"Main", "main", "([Ljava/lang/String;)V", "void Main.main(java.lang.String[])"},
		{"A", "m", "(BCDFISZ[[I)[B", "byte[] A.m(byte, char, double, float, int, short, boolean, int[][])"},
		{"A$B", "<init>", "()V", "void A$B.<init>()"},
		// Hidden classes are named after their address: one name for all.
		{"java/lang/invoke/LambdaForm$MH+0x00007fa8f0001c00", "invoke", "(Ljava/lang/Object;J)Ljava/lang/Object;", "java.lang.Object java.lang.invoke.LambdaForm$MH+<hidden>.invoke(java.lang.Object, long)"},
		{"Main$$Lambda$14/0x0000000800c03000", "run", "()V", "void Main$$Lambda$14+<hidden>.run()"},
		{"Ox0x", "m", "()V", "void Ox0x.m()"},
		{"A+0xzz", "m", "()V", "void A+0xzz.m()"},
	} {
		got, err := ExternalMethodName(tc.class, tc.method, tc.descriptor)
		if err != nil || got != tc.want {
			t.Errorf("%s %s %s: %q %v, want %q", tc.class, tc.method, tc.descriptor, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "J", "(J", "(Q)V", "(Ljava/lang/String)V", "([)V", "(J)", "(J)JJ"} {
		if got, err := ExternalMethodName("A", "m", bad); err == nil {
			t.Errorf("descriptor %q: %q, want an error", bad, got)
		}
	}
}

// writeUnsigned5 is HotSpot's UNSIGNED5::write_uint, to check the reader
// against.
func writeUnsigned5(v uint32, x byte) []byte {
	low := uint32(192) - uint32(x)
	var out []byte
	for i := 0; i < 4; i++ {
		if v < low {
			return append(out, byte(v)+x)
		}
		v -= low
		out = append(out, byte(low+v%64)+x)
		v /= 64
	}
	return append(out, byte(v)+x)
}

func TestUnsigned5(t *testing.T) {
	for _, x := range []byte{0, 1} {
		var stream []byte
		values := []uint32{0, 1, 190, 191, 192, 193, 255, 256, 12345, 1 << 20, 1<<31 - 1, 1<<32 - 1}
		for i := uint32(0); i < 2000; i++ {
			values = append(values, i*2654435761)
		}
		for _, v := range values {
			stream = append(stream, writeUnsigned5(v, x)...)
		}
		r := unsigned5{b: stream, x: x}
		for _, want := range values {
			if got := r.next(); got != want || r.err != nil {
				t.Fatalf("x=%d: %d, %v; want %d", x, got, r.err, want)
			}
		}
		if len(r.b) != 0 {
			t.Errorf("x=%d: %d bytes left", x, len(r.b))
		}
	}
	// JDK 17 (x=0): 192 is [192 0]; JDK 20+ (x=1): 191 is [192 1].
	if r := (unsigned5{b: []byte{192, 0}}); r.next() != 192 || r.err != nil {
		t.Errorf("[192 0], x=0: want 192")
	}
	if r := (unsigned5{b: []byte{192, 1}, x: 1}); r.next() != 191 || r.err != nil {
		t.Errorf("[192 1], x=1: want 191")
	}
	for _, bad := range []unsigned5{{b: nil}, {b: []byte{200}}, {b: []byte{0}, x: 1}, {b: []byte{192, 0}, x: 1}} {
		if bad.next(); bad.err == nil {
			t.Errorf("%v x=%d: no error", bad.b, bad.x)
		}
	}
}

// lineTable writes a ConstMethod line number table as HotSpot's
// CompressedLineNumberWriteStream does, entries of (bytecode index, line).
func lineTable(x byte, entries ...[2]int) []byte {
	zigzag := func(v int) uint32 { return uint32(int32(v)<<1 ^ int32(v)>>31) }
	var out []byte
	bci, line := 0, 0
	for _, e := range entries {
		db, dl := e[0]-bci, e[1]-line
		if db >= 0 && db < 32 && dl >= 0 && dl < 8 && (db|dl) != 0 && db<<3|dl != 0xFF {
			out = append(out, byte(db<<3|dl))
		} else {
			out = append(out, 0xFF)
			out = append(out, writeUnsigned5(zigzag(db), x)...)
			out = append(out, writeUnsigned5(zigzag(dl), x)...)
		}
		bci, line = e[0], e[1]
	}
	return append(out, 0)
}

func TestLineTable(t *testing.T) {
	for _, x := range []byte{0, 1} {
		table := lineTable(x, [2]int{0, 10}, [2]int{5, 12}, [2]int{300, 100}, [2]int{310, 99})
		if end := lineTableEnd(append(table, 7, 7, 7), x); end != len(table) {
			t.Errorf("x=%d: table of %d bytes ends at %d", x, len(table), end)
		}
		if end := lineTableEnd(table[:len(table)-1], x); end != 0 {
			t.Errorf("x=%d: a cut table ends at %d", x, end)
		}
		m := &javaMethod{lineTable: table, codeSize: 400}
		for bci, want := range map[int]int{-1: 10, 0: 10, 3: 10, 5: 12, 299: 12, 300: 100, 305: 100, 310: 99, 399: 99, 10000: 10} {
			if got := m.line(bci, x); got != want {
				t.Errorf("x=%d: bytecode %d at line %d, want %d", x, bci, got, want)
			}
		}
	}
	if got := (&javaMethod{codeSize: 10}).line(3, 0); got != 0 {
		t.Errorf("no table: line %d, want 0", got)
	}
}
