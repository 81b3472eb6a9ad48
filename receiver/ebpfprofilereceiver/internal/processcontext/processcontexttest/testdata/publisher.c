// publisher publishes an OpenTelemetry process context (OTEP 4719) the way
// an SDK does, for the tests of its readers.
//
//   publisher [later-]memfd|anon KEY=VALUE...
//
// memfd: the header in a memfd mapping ("/memfd:OTEL_CTX" in maps).
// anon: in an anonymous mapping named with prctl(PR_SET_VMA) where the
// kernel can ("[anon:OTEL_CTX]"), unnamed where it cannot, and read-only
// between updates, as the OTEP's reference implementation leaves it.
// The payload is a protobuf Resource with a string attribute per
// KEY=VALUE, kept apart from the header. Prints "published 0xADDR" once
// the context is out; each line read from stdin ("KEY=VALUE ...") replaces
// the attributes by the OTEP's updating protocol and prints "updated
// 0xADDR"; end of input exits. With "later-", nothing is published until
// the first line, whose words are the attributes (an SDK set up after its
// process started). It burns CPU meanwhile, so that a sampler sees it.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

struct header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t published_at_ns;
	char *payload;
};

static char *put_varint(char *p, size_t v)
{
	while (v >= 0x80) {
		*p++ = (char)(v | 0x80);
		v >>= 7;
	}
	*p++ = (char)v;
	return p;
}

static size_t varint_len(size_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

// encode returns a Resource with one string attribute per "KEY=VALUE".
static char *encode(int n, char **pairs, uint32_t *size)
{
	char *buf = malloc(65536), *p = buf;
	for (int i = 0; i < n; i++) {
		char *eq = strchr(pairs[i], '=');
		if (!eq)
			continue;
		size_t klen = eq - pairs[i], vlen = strlen(eq + 1);
		size_t any = 1 + varint_len(vlen) + vlen;                 // AnyValue.string_value
		size_t kv = 1 + varint_len(klen) + klen + 1 + varint_len(any) + any;
		*p++ = (1 << 3) | 2; // Resource.attributes
		p = put_varint(p, kv);
		*p++ = (1 << 3) | 2; // KeyValue.key
		p = put_varint(p, klen);
		memcpy(p, pairs[i], klen);
		p += klen;
		*p++ = (2 << 3) | 2; // KeyValue.value
		p = put_varint(p, any);
		*p++ = (1 << 3) | 2; // AnyValue.string_value
		p = put_varint(p, vlen);
		memcpy(p, eq + 1, vlen);
		p += vlen;
	}
	*size = p - buf;
	return buf;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void *burn(void *arg)
{
	volatile uint64_t x = 0;
	(void)arg;
	for (;;)
		x++;
	return NULL;
}

static struct header *h;
static size_t len;
static int anon;

// publish creates the context with the attributes in pairs.
static int publish(const char *how, int n, char **pairs)
{
	len = 2 * sysconf(_SC_PAGESIZE);
	anon = strcmp(how, "anon") == 0;
	if (!anon) {
		int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, len) != 0) {
			perror("memfd");
			return -1;
		}
		h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	} else {
		h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (h == MAP_FAILED) {
		perror("mmap");
		return -1;
	}
	madvise(h, len, MADV_DONTFORK);
	h->version = 2;
	h->payload = encode(n, pairs, &h->payload_size);
	h->published_at_ns = now_ns();
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(h->signature, "OTEL_CTX", 8);
	if (anon)
		mprotect(h, len, PROT_READ);
	// Fails on a kernel without CONFIG_ANON_VMA_NAME (and for a memfd):
	// made anyway, as the OTEP says.
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, h, len, "OTEL_CTX");
	printf("published %p\n", (void *)h);
	fflush(stdout);
	return 0;
}

// update replaces the attributes by the OTEP's updating protocol.
static void update(int n, char **pairs)
{
	uint32_t size;
	char *payload = encode(n, pairs, &size);
	if (anon)
		mprotect(h, len, PROT_READ | PROT_WRITE);
	h->published_at_ns = 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	h->payload = payload;
	h->payload_size = size;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	h->published_at_ns = now_ns();
	if (anon)
		mprotect(h, len, PROT_READ);
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, h, len, "OTEL_CTX");
	printf("updated %p\n", (void *)h);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *how;
	pthread_t t;

	if (argc < 2) {
		fprintf(stderr, "usage: publisher [later-]memfd|anon KEY=VALUE...\n");
		return 2;
	}
	how = argv[1];
	int later = strncmp(how, "later-", 6) == 0;
	if (later)
		how += 6;
	else if (publish(how, argc - 2, argv + 2) != 0)
		return 1;
	pthread_create(&t, NULL, burn, NULL);

	char line[4096];
	while (fgets(line, sizeof(line), stdin)) {
		char *words[64];
		int n = 0;
		for (char *w = strtok(line, " \n"); w && n < 64; w = strtok(NULL, " \n"))
			words[n++] = w;
		if (!h) {
			if (publish(how, n, words) != 0)
				return 1;
		} else {
			update(n, words);
		}
	}
	return 0;
}
