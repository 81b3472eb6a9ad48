package symbolize

import (
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// TestRustLegacyNames: legacy Rust names as rustc-demangle reads them
// (cases from its tests and from std), C++ names and broken ones left to
// the library.
func TestRustLegacyNames(t *testing.T) {
	for mangled, want := range map[string]string{
		"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h0123456789abcdefE":                                                 "std::sys::backtrace::__rust_begin_short_backtrace",
		"_ZN3foo4_bar17h05af221e174051e9E":                                                                                        "foo::_bar",
		"_ZN7mycrate6worker5parse17h0123456789abcdefE":                                                                            "mycrate::worker::parse",
		"_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17h0123456789abcdefE": "core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>",
		"_ZN71_$LT$Test$u20$$u2b$$u20$$u27$static$u20$as$u20$foo..Bar$LT$Test$GT$$GT$3bar17h930b740aa94f1d3aE":                    "<Test + 'static as foo::Bar<Test>>::bar",
		"_ZN4test1a2bc17h0123456789abcdefE.llvm.4523":                                                                             "test::a::bc",
		"_ZN3foo3bar17h05af221e174051e9E":                                                                                         "foo::bar",
		"_ZN5alloc5alloc8box_free17h0123456789abcdefE":                                                                            "alloc::alloc::box_free",
		"_ZN5$RF$a5$BP$b5$SP$c17h0123456789abcdefE":                                                                               "&a::*b::@c",
	} {
		got, ok := rustLegacy(mangled)
		if !ok || got != want {
			t.Errorf("rustLegacy(%s) = %q %v, want %q", mangled, got, ok, want)
		}
		if d := demangled(mangled); d != want {
			t.Errorf("demangled(%s) = %q, want %q", mangled, d, want)
		}
	}
	for _, other := range []string{
		"_ZN3foo3barE",                     // C++: no hash
		"_ZN3foo3bar17h05af221e174051e9",   // no E
		"_ZN3foo3bar17hxyzf221e174051e9E",  // not a hash
		"_ZN3foo99bar17h05af221e174051e9E", // a length past the end
		"_ZN3f$E3bar17h05af221e174051e9E",  // an unclosed escape
		"_ZN4$u$a17h05af221e174051e9E",     // an empty code
		"_ZN6$ud800$17h05af221e174051e9E",  // a surrogate
		"_ZN3foo3bar17h05af221e174051e9EX", // trailing junk
		"_ZNK3foo3barEv", "main", "_Z3fooi", "_RNvCs1234_7mycrate4main", "",
	} {
		if got, ok := rustLegacy(other); ok {
			t.Errorf("rustLegacy(%q) = %q, want not a legacy Rust name", other, got)
		}
	}
	// C++ still goes to the library.
	if got, want := demangled("_ZNSt6vectorIiSaIiEE9push_backERKi"), demangle.Filter("_ZNSt6vectorIiSaIiEE9push_backERKi", demangle.NoParams); got != want {
		t.Errorf("C++: %q, want the library's %q", got, want)
	}
}

func FuzzRustLegacy(f *testing.F) {
	f.Add("_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h0123456789abcdefE")
	f.Add("_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..$u7b$$u7b$closure$u7d$$u7d$$GT$17h0123456789abcdefE")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = rustLegacy(s) // must not panic
	})
}
