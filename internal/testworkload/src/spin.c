// A CPU-bound workload with a known profile: hot_a runs three times as many
// iterations of the same loop as hot_b, so ~75% of its samples are in hot_a
// and ~25% in hot_b, both called from dispatch, called from main.
//
// Each round's length is drawn at random (mean 200,000, between 100,000 and
// 300,000): with a fixed length a round took a constant ~1 ms, and a sampling
// period near a whole number of rounds (499 Hz is 2.004 ms) hit the same
// point of the round sample after sample. The shares then depended on that
// phase, not on the time spent: a capture at 499 Hz on a loaded CI machine
// saw hot_a at 0.864.
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
	unsigned long rng = 0x9E3779B97F4A7C15UL ^ (unsigned long)start.tv_nsec;
	for (;;) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		dispatch(100000 + rng % 200001);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
	}
	return 0;
}
