package tracectx

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sys/unix"
)

// contextMappings are this process's mappings named for a process context,
// by start address, as /proc/self/maps lists them.
func contextMappings(t *testing.T) []uint64 {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, line := range strings.Split(string(maps), "\n") {
		if !strings.Contains(line, "OTEL_CTX") {
			continue
		}
		start, _, _ := strings.Cut(line, "-")
		v, err := strconv.ParseUint(start, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// header reads the published header through /proc/self/mem, as a reader
// in another process does.
func header(t *testing.T, addr uint64) (sig string, version, size uint32, publishedAt, payload uint64, body []byte) {
	t.Helper()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var h [ctxHeaderSize]byte
	if _, err := mem.ReadAt(h[:], int64(addr)); err != nil {
		t.Fatal(err)
	}
	size = binary.LittleEndian.Uint32(h[12:])
	payload = binary.LittleEndian.Uint64(h[24:])
	body = make([]byte, size)
	if _, err := mem.ReadAt(body, int64(payload)); err != nil {
		t.Fatal(err)
	}
	return string(h[:8]), binary.LittleEndian.Uint32(h[8:]), size, binary.LittleEndian.Uint64(h[16:]), payload, body
}

func TestPublishResource(t *testing.T) {
	attrs := []attribute.KeyValue{
		attribute.String("service.name", "checkout"),
		attribute.String("service.version", "1.4.2"),
		attribute.Int("service.port", 8080),
	}
	if err := PublishResource(attrs...); err != nil {
		t.Fatal(err)
	}
	at := contextMappings(t)
	if len(at) != 1 || at[0] != uint64(uintptr(unsafe.Pointer(&published.mem[0]))) {
		t.Fatalf("mappings named OTEL_CTX at %x, want one, the published one", at)
	}
	sig, version, size, first, payload, body := header(t, at[0])
	if sig != "OTEL_CTX" || version != 2 || first == 0 || payload != uint64(uintptr(unsafe.Pointer(&published.payload[0]))) {
		t.Errorf("header %q v%d published at %d, payload at %#x; want OTEL_CTX v2, a time, the published payload", sig, version, first, payload)
	}
	// The OTEP's clock: CLOCK_BOOTTIME, which counts from boot (the
	// realtime clock would be decades past it).
	var boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		t.Fatal(err)
	}
	if now := uint64(boot.Nano()); first > now || now-first > uint64(time.Minute) {
		t.Errorf("published at %d ns, want CLOCK_BOOTTIME shortly before %d", first, now)
	}
	if want := encodeProcessContext(attrs); int(size) != len(want) || !bytes.Equal(body, want) {
		t.Errorf("payload %x, want %x", body, want)
	}
	// service.port as its string form.
	if !bytes.Contains(body, []byte("\x12\x06\x0a\x048080")) {
		t.Errorf("payload %x lacks service.port as the string 8080", body)
	}

	// An update in place: same mapping, new time and payload.
	if err := PublishResource(attribute.String("service.name", "checkout"), attribute.String("service.version", "1.5.0")); err != nil {
		t.Fatal(err)
	}
	_, _, _, second, _, body := header(t, at[0])
	if now := contextMappings(t); len(now) != 1 || now[0] != at[0] || second <= first || !bytes.Contains(body, []byte("1.5.0")) {
		t.Errorf("after an update: mappings %x, published at %d (was %d), payload %q", now, second, first, body)
	}

	// Larger than a page: the same header, where readers found it.
	big := attribute.String("big", strings.Repeat("x", 3*os.Getpagesize()))
	if err := PublishResource(attribute.String("service.name", "checkout"), big); err != nil {
		t.Fatal(err)
	}
	want := encodeProcessContext([]attribute.KeyValue{attribute.String("service.name", "checkout"), big})
	if now := contextMappings(t); len(now) != 1 || now[0] != at[0] {
		t.Errorf("after a larger publication: mappings %x, want %x", now, at[0])
	} else if _, _, _, third, _, body := header(t, at[0]); third <= second || !bytes.Equal(body, want) {
		t.Errorf("after a larger publication: published at %d (was %d), payload of %d bytes, want %d", third, second, len(body), len(want))
	}

	if err := PublishResource(attribute.String("big", strings.Repeat("x", maxContextPayload))); err == nil {
		t.Error("a payload over 64 KiB was published")
	}
}
