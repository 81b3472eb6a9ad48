// publisher publishes an OpenTelemetry process context (OTEP 4719) the way
// an SDK does, for the tests of its readers.
//
//   publisher [later-]memfd|anon|ref KEY=VALUE...
//
// memfd: as the OTEP says today, written here: the header in a private
// memfd mapping ("/memfd:OTEL_CTX (deleted)" in maps), the payload a
// ProcessContext (the Resource in field 1, an extra attribute in field 2),
// the publication time from CLOCK_BOOTTIME and written last.
// anon: as the OTEP's first reference implementation (2025-12) did: an
// anonymous mapping named with prctl(PR_SET_VMA) where the kernel can
// ("[anon:OTEL_CTX]"), unnamed where it cannot, and read-only between
// updates; the payload the Resource alone; CLOCK_REALTIME; the signature
// written last.
// ref: with the OTEP's reference implementation itself
// (otelprocessctx/otel_process_ctx.c, version 1.0.0, unmodified), which
// also publishes extra attributes (its thread context configuration).
//
// A string attribute per KEY=VALUE. Prints "published 0xADDR" once the
// context is out; each line read from stdin ("KEY=VALUE ...") replaces the
// attributes by the OTEP's updating protocol and prints "updated 0xADDR";
// the line "drop" takes the context away (as an SDK that shuts down) and
// prints "dropped", and the next line publishes anew; end of input exits. With "later-", nothing is published until the first
// line, whose words are the attributes (an SDK set up after its process
// started). It burns CPU meanwhile, so that a sampler sees it.
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

#include "otel_process_ctx.h"

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

// encode_resource returns a Resource with one string attribute per
// "KEY=VALUE", written at p.
static char *encode_resource(char *p, int n, char **pairs)
{
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
	return p;
}

// The extra attribute the memfd mode publishes (ProcessContext field 2):
// KeyValue{key "threadlocal.schema_version", value {string "v1"}}. Readers
// take the resource's attributes only.
static const char extra_kv[] = "\x0a\x1athreadlocal.schema_version\x12\x04\x0a\x02v1";

// encode returns the payload: the Resource alone (bare), or a
// ProcessContext holding it and the extra attribute.
static char *encode(int n, char **pairs, int bare, uint32_t *size)
{
	char *buf = malloc(65536), *p;
	if (bare) {
		*size = encode_resource(buf, n, pairs) - buf;
		return buf;
	}
	char *res = malloc(65536);
	size_t rlen = encode_resource(res, n, pairs) - res;
	p = buf;
	*p++ = (1 << 3) | 2; // ProcessContext.resource
	p = put_varint(p, rlen);
	memcpy(p, res, rlen);
	p += rlen;
	*p++ = (2 << 3) | 2; // ProcessContext.extra_attributes
	p = put_varint(p, sizeof(extra_kv) - 1);
	memcpy(p, extra_kv, sizeof(extra_kv) - 1);
	p += sizeof(extra_kv) - 1;
	free(res);
	*size = p - buf;
	return buf;
}

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
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
static int anon, ref;

// ref_publish publishes (or updates) with the reference implementation:
// the semantic-convention keys it has fields for go there, the others are
// resource attributes; its thread context configuration goes to the extra
// attributes, one of them an array.
static int ref_publish(int n, char **pairs)
{
	static const char *key_map[] = {"http.route", "user.id", NULL};
	static const otel_thread_ctx_config_data thread_ctx = {.schema_version = "tlsdesc_v1_dev", .attribute_key_map = key_map};
	const char *attrs[2 * 64 + 1];
	int na = 0;
	otel_process_ctx_data d = {
		.deployment_environment_name = "", .service_instance_id = "", .service_name = "", .service_version = "",
		.telemetry_sdk_language = "c", .telemetry_sdk_version = OTEL_PROCESS_CTX_VERSION_STRING, .telemetry_sdk_name = "otel_process_ctx",
		.resource_attributes = attrs, .thread_ctx_config = &thread_ctx,
	};
	for (int i = 0; i < n && na < 2 * 64; i++) {
		char *eq = strchr(pairs[i], '=');
		if (!eq)
			continue;
		*eq = 0;
		const char *k = pairs[i], *v = eq + 1;
		if (!strcmp(k, "service.name"))
			d.service_name = v;
		else if (!strcmp(k, "service.version"))
			d.service_version = v;
		else if (!strcmp(k, "service.instance.id"))
			d.service_instance_id = v;
		else if (!strcmp(k, "deployment.environment.name"))
			d.deployment_environment_name = v;
		else {
			attrs[na++] = k;
			attrs[na++] = v;
		}
	}
	attrs[na] = NULL;
	otel_process_ctx_result r = otel_process_ctx_publish(&d);
	if (!r.success) {
		fprintf(stderr, "otel_process_ctx_publish: %s\n", r.error_message);
		return -1;
	}
	// Its address, from this process's maps, for the tests to compare.
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		if (strstr(line, "OTEL_CTX")) {
			h = (struct header *)strtoull(line, NULL, 16);
			break;
		}
	}
	if (f)
		fclose(f);
	return h ? 0 : -1;
}

// publish creates the context with the attributes in pairs.
static int publish(const char *how, int n, char **pairs)
{
	ref = strcmp(how, "ref") == 0;
	if (ref) {
		if (ref_publish(n, pairs) != 0)
			return -1;
		printf("published %p\n", (void *)h);
		fflush(stdout);
		return 0;
	}
	len = 2 * sysconf(_SC_PAGESIZE);
	anon = strcmp(how, "anon") == 0;
	if (!anon) {
		int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, len) != 0) {
			perror("memfd");
			return -1;
		}
		h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
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
	h->payload = encode(n, pairs, anon, &h->payload_size);
	if (anon) {
		h->published_at_ns = now_ns(CLOCK_REALTIME);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		memcpy(h->signature, "OTEL_CTX", 8);
		mprotect(h, len, PROT_READ);
	} else {
		memcpy(h->signature, "OTEL_CTX", 8);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		__atomic_store_n(&h->published_at_ns, now_ns(CLOCK_BOOTTIME), __ATOMIC_SEQ_CST);
	}
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
	if (ref) {
		if (ref_publish(n, pairs) != 0)
			exit(1);
		printf("updated %p\n", (void *)h);
		fflush(stdout);
		return;
	}
	uint32_t size;
	char *payload = encode(n, pairs, anon, &size);
	if (anon)
		mprotect(h, len, PROT_READ | PROT_WRITE);
	uint64_t prev = h->published_at_ns;
	h->published_at_ns = 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	h->payload = payload;
	h->payload_size = size;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint64_t t = now_ns(anon ? CLOCK_REALTIME : CLOCK_BOOTTIME);
	h->published_at_ns = t > prev ? t : prev + 1;
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
		fprintf(stderr, "usage: publisher [later-]memfd|anon|ref KEY=VALUE...\n");
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
		if (n == 1 && !strcmp(words[0], "drop")) {
			if (ref)
				otel_process_ctx_drop_current();
			else if (h)
				munmap(h, len);
			h = NULL;
			printf("dropped\n");
			fflush(stdout);
		} else if (!h) {
			if (publish(how, n, words) != 0)
				return 1;
		} else {
			update(n, words);
		}
	}
	return 0;
}
