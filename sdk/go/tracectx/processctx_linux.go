package tracectx

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sys/unix"
)

// The process context (OTEP 4719): a header, then the payload, in one
// mapping of its own. The header is what readers look for:
//
//	char   signature[8]              "OTEL_CTX"
//	uint32 version                   2
//	uint32 payload_size
//	uint64 monotonic_published_at_ns CLOCK_BOOTTIME; written last, and 0
//	                                 while an update is under way
//	char*  payload                   in this process's Go heap (which
//	                                 does not move objects), kept alive
//	                                 by published
const (
	ctxSignature  = "OTEL_CTX"
	ctxVersion    = 2
	ctxHeaderSize = 32
	// maxContextPayload bounds what is published; the agent reads at most
	// 64 KiB.
	maxContextPayload = 64 << 10
	prSetVMA          = 0x53564d41 // PR_SET_VMA
	prSetVMAAnonName  = 0          // PR_SET_VMA_ANON_NAME
)

var published struct {
	sync.Mutex
	mem []byte // the header's mapping, nil before the first publication
	// payload is what the header points to; previous, what it pointed to
	// before the last update, kept until the next one for a reader still
	// copying it (the publication time tells it to read again).
	payload, previous []byte
}

// PublishResource publishes attrs (a resource's attributes:
// res.Attributes()...) as this process's OpenTelemetry process context
// (OTEP 4719), which the hotpath agent, and any other reader of the format,
// takes the service's name, version, namespace, instance id and deployment
// environment from: its profiles then carry the names the application's
// own telemetry carries. Call it once the resource is known (beside the
// TracerProvider); a later call replaces what was published. Values that
// are not strings are published as their string form.
//
// It maps a memfd named OTEL_CTX (an anonymous mapping where memfds are not
// allowed), not inherited across fork, and names it with prctl where the
// kernel allows: one page for the header, for the life of the process. An
// update changes the header in place, whatever the payload's size, so
// readers keep finding it where they found it.
func PublishResource(attrs ...attribute.KeyValue) error {
	payload := encodeProcessContext(attrs)
	if len(payload) > maxContextPayload {
		return fmt.Errorf("publish process context: %d bytes of attributes, at most %d", len(payload), maxContextPayload)
	}
	published.Lock()
	defer published.Unlock()
	if m := published.mem; m != nil {
		update(m, payload)
		return nil
	}
	m, err := mapContext()
	if err != nil {
		return fmt.Errorf("publish process context: %w", err)
	}
	copy(m, ctxSignature)
	binary.LittleEndian.PutUint32(m[8:], ctxVersion)
	setPayload(m, payload)
	// The publication time last, in one sequentially consistent store: a
	// reader that sees it non-zero sees the rest.
	atomic.StoreUint64(word(m, 16), publicationTime(0))
	name(m)
	published.mem = m
	return nil
}

// update replaces the payload, as the OTEP's updating protocol says:
// publication time 0, the new payload's address and size, then the new
// time.
func update(m []byte, payload []byte) {
	prev := atomic.SwapUint64(word(m, 16), 0)
	setPayload(m, payload)
	atomic.StoreUint64(word(m, 16), publicationTime(prev))
	name(m)
}

// setPayload points the header at payload and keeps it (and the one it
// replaces) alive.
func setPayload(m []byte, payload []byte) {
	published.previous, published.payload = published.payload, payload
	binary.LittleEndian.PutUint32(m[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(m[24:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(payload)))))
}

// mapContext maps the page that holds the header.
func mapContext() ([]byte, error) {
	size := os.Getpagesize()
	var m []byte
	// As the OTEP's publication protocol says: a memfd (MFD_NOEXEC_SEAL is
	// refused by kernels before 6.3), mapped private, its descriptor
	// closed once mapped; its name shows in the maps.
	fd, err := unix.MemfdCreate(ctxSignature, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if err != nil {
		fd, err = unix.MemfdCreate(ctxSignature, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err == nil {
		if err = unix.Ftruncate(fd, int64(size)); err == nil {
			m, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		}
		unix.Close(fd)
	}
	if err != nil {
		// memfd_create refused (a seccomp profile): an anonymous mapping,
		// which readers find by its name where the kernel can name it.
		if m, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
			return nil, err
		}
	}
	if err := unix.Madvise(m, unix.MADV_DONTFORK); err != nil {
		_ = unix.Munmap(m)
		return nil, err
	}
	return m, nil
}

// name names the mapping OTEL_CTX, as the OTEP asks each publication to;
// a kernel without CONFIG_ANON_VMA_NAME (and any memfd mapping) refuses,
// which is fine: readers find a memfd by its file name.
func name(m []byte) {
	n := []byte(ctxSignature + "\x00")
	_ = unix.Prctl(prSetVMA, prSetVMAAnonName, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&n[0])))
	runtime.KeepAlive(n)
}

func word(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }

// publicationTime is CLOCK_BOOTTIME now, as the OTEP asks, and after prev
// (the time it replaces): readers take a new time for new attributes.
func publicationTime(prev uint64) uint64 {
	var ts unix.Timespec
	var t uint64
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil {
		t = uint64(ts.Nano())
	}
	return max(t, prev+1)
}
