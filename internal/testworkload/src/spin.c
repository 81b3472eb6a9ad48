// A CPU-bound workload with a known profile: hot_a runs three times as many
// iterations of the same loop as hot_b, so ~75% of its samples are in hot_a
// and ~25% in hot_b, both called from dispatch, called from main.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void hot_a(unsigned long n) {
	unsigned long x = sink;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	sink = x;
}

__attribute__((noinline)) void hot_b(unsigned long n) {
	unsigned long x = sink;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	sink = x;
}

__attribute__((noinline)) void dispatch(unsigned long n) {
	hot_a(3 * n);
	hot_b(n);
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		dispatch(200000);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
	}
	return 0;
}
