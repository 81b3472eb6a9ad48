//go:build linux

package sampler

import "testing"

// TestJavaInterpreted decodes the kernel's entries for interpreted Java
// frames (hotspot_interpreted) and tells them from code addresses.
func TestJavaInterpreted(t *testing.T) {
	for _, tc := range []struct {
		entry  uint64
		method uint64
		bci    int
		ok     bool
	}{
		{1<<63 | 17<<47 | 0x7f12345678, 0x7f12345678, 17, true},
		{1<<63 | 0<<47 | 0x1000, 0x1000, 0, true},
		{1<<63 | 0xfffe<<47 | 0x7fffffffeff8, 0x7fffffffeff8, 0xfffe, true},
		{1<<63 | 0xffff<<47 | 0x1000, 0x1000, -1, true}, // no bytecode index
		{0x7f1234567890, 0, 0, false},                   // a code address
		{0, 0, 0, false},
	} {
		method, bci, ok := JavaInterpreted(tc.entry)
		if method != tc.method || bci != tc.bci || ok != tc.ok {
			t.Errorf("JavaInterpreted(%#x) = %#x, %d, %v; want %#x, %d, %v", tc.entry, method, bci, ok, tc.method, tc.bci, tc.ok)
		}
	}
}
