// Test program: prints the runtime addresses of known functions, then waits
// for stdin to close so the test can snapshot and symbolize it while it runs.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef HOT_V2
// Moves hot_leaf in the second build, so a stale table would misresolve it.
#define LEAF_ALIGN __attribute__((aligned(256)))
#else
#define LEAF_ALIGN
#endif

LEAF_ALIGN __attribute__((noinline)) int hot_leaf(int x) {
	volatile int v = x;
	for (int i = 0; i < 8; i++) v = v * 31 + i;
	return v;
}

__attribute__((noinline)) int hot_mid(int x) { return hot_leaf(x) + 1; }

// Local symbol: only .symtab has it.
static __attribute__((noinline)) int hot_static(int x) {
	volatile int v = x;
	return v * 3;
}

int main(int argc, char **argv) {
	void *lib_fn = NULL;
	if (argc > 1) {
		void *h = dlopen(argv[1], RTLD_NOW);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		lib_fn = dlsym(h, "hot_lib_func");
	}
	void *anon = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("hot_leaf=%p hot_mid=%p hot_static=%p hot_lib_func=%p getpid=%p anon=%p\n",
	       (void *)&hot_leaf, (void *)&hot_mid, (void *)&hot_static, lib_fn,
	       dlsym(RTLD_DEFAULT, "getpid"), anon);
	fflush(stdout);
	char buf[1];
	while (read(0, buf, 1) > 0) {
	}
	return (hot_mid(argc) + hot_static(argc)) & 1;
}
