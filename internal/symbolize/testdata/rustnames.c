// Functions named as rustc names them, for the demangling test: in Rust's
// v0 mangling (_R; parts of the standard library a current rustc links in
// carry such names) and in its legacy one (_ZN...17h<hash>E, C++'s with a
// hash at the end). gcc emits exactly the names the asm labels give.
long v0_spin(long n) __asm__("_RNvNtCs1a2b3c4d5e_7mycrate6worker4spin");
long legacy_parse(long n) __asm__("_ZN7mycrate6worker5parse17h0123456789abcdefE");
// At the root of every Rust thread's stack; its identifier starts with "__".
long legacy_begin(long n) __asm__("_ZN3std3sys9backtrace28__rust_begin_short_backtrace17hfa891d39abf08321E");

__attribute__((noinline)) long v0_spin(long n) {
	volatile long v = n;
	return v * 2;
}

__attribute__((noinline)) long legacy_parse(long n) {
	volatile long v = n;
	return v + 1;
}

__attribute__((noinline)) long legacy_begin(long n) {
	volatile long v = n;
	return v + 3;
}
