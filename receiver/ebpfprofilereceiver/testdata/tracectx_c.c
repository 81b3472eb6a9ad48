/* Test program for the C SDK: threads 1 and 2 each set their own trace
 * context (trace ID byte 0 = thread index, last byte 0xcc) and burn CPU in
 * burn_traced, then clear; thread 0 burns in burn_untraced without context.
 * argv[1] is the work per thread in units of 100,000 loop iterations (work,
 * not wall time: the samples do not depend on machine load). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hotpath_tracectx.h"

static long units;
volatile unsigned long sink;

__attribute__((noinline)) void burn_traced(long n)
{
	for (long j = 0; j < n; j++)
		for (int i = 0; i < 100000; i++)
			sink += i;
}

__attribute__((noinline)) void burn_untraced(long n)
{
	for (long j = 0; j < n; j++)
		for (int i = 0; i < 100000; i++)
			sink ^= i;
}

static void *worker(void *arg)
{
	long i = (long)arg;

	if (i == 0) {
		burn_untraced(units);
		return 0;
	}
	struct hotpath_trace_ctx c;
	memset(&c, 0, sizeof c);
	c.trace_id[0] = (unsigned char)i;
	c.trace_id[15] = 0xcc;
	c.span_id[0] = (unsigned char)i;
	hotpath_tracectx_set(&c);
	burn_traced(units);
	hotpath_tracectx_clear();
	return 0;
}

int main(int argc, char **argv)
{
	char line[8];
	pthread_t t[3];

	units = argc > 1 ? atol(argv[1]) : 1000;
	setvbuf(stdout, 0, _IONBF, 0);
	puts("ready");
	if (!fgets(line, sizeof line, stdin))
		return 3;
	for (long i = 0; i < 3; i++)
		pthread_create(&t[i], 0, worker, (void *)i);
	for (long i = 0; i < 3; i++)
		pthread_join(t[i], 0);
	puts("done");
	return 0;
}
