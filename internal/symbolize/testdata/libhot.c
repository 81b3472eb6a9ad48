// Shared library for the test program to dlopen.
__attribute__((noinline)) int hot_lib_helper(int x) { return x ^ 0x5a; }

__attribute__((noinline)) int hot_lib_func(int x) {
	volatile int v = x;
	return hot_lib_helper(v) * 5;
}
