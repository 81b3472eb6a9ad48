// Package processcontext reads the resource attributes an OpenTelemetry SDK
// publishes for readers outside its process (OTEP 4719, "Process Context"):
// a small mapping whose header says where a protobuf-encoded
// opentelemetry.proto.processcontext.v1development.ProcessContext (the
// SDK's Resource, and extra attributes) lies in the process's memory.
// The SDK knows its service's name, version, environment and instance id
// as its own traces carry them; the agent otherwise guesses them from the
// process's environment and command line.
//
// Layout of the header (little-endian, 32 bytes), as the OTEP gives it:
//
//	char     signature[8]              "OTEL_CTX"
//	uint32   version                   2
//	uint32   payload_size              bytes of the encoded payload
//	uint64   monotonic_published_at_ns CLOCK_BOOTTIME; written last, and
//	                                   0 while the publisher updates it
//	char*    payload                   address of the encoded payload
//
// The content is the process's own: every field is checked and bounded,
// and a context that does not read cleanly is not used.
package processcontext

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// Signature opens a published header; it is also the mapping's name.
const Signature = "OTEL_CTX"

// Version is the header version read: the OTEP's current one (1 was for
// development and laid out differently).
const Version = 2

const (
	headerSize = 32
	// MaxPayload bounds the encoded Resource read from a process: an SDK
	// publishes a few hundred bytes (the reference implementation caps
	// each key and value at 4 KiB).
	MaxPayload = 64 << 10
	// maxAttributes, maxKey and maxValue bound what is kept of a payload.
	maxAttributes = 128
	maxKey        = 256
	maxValue      = 4096
	// attempts bounds the reads of a context being updated meanwhile.
	attempts = 3
	// maxUnnamed is the largest anonymous read-only mapping probed for a
	// header: the first reference implementation (2025-12) mapped 2 pages,
	// read-only and without a memfd, and left them unnamed where the kernel
	// cannot name mappings (no CONFIG_ANON_VMA_NAME).
	maxUnnamed = 16 << 10
)

// Resource is one publication of a process's context.
type Resource struct {
	// Address is where its header is in the process's memory.
	Address uint64
	// PublishedAt is the publication's time as the publisher wrote it
	// (CLOCK_BOOTTIME ns, the OTEP says): a new value means new attributes.
	PublishedAt uint64
	// Attributes are the string-valued attributes, by key.
	Attributes map[string]string
}

// ErrNotPublished: there is no context where one was looked for.
var ErrNotPublished = errors.New("no process context published")

// ErrUnchanged: the context is the publication already read (ReadAtIfNew).
var ErrUnchanged = errors.New("process context unchanged")

// Candidates returns where a maps listing may hold a process context: first
// the mappings named for it (a memfd "/memfd:OTEL_CTX", or an anonymous
// mapping the kernel lets the publisher name, "[anon:OTEL_CTX]" or
// "[anon_shmem:OTEL_CTX]"), then small anonymous read-only mappings, where
// a publisher built on the first reference implementation leaves its
// header when its kernel cannot name mappings. (The OTEP now has publishers
// use a memfd, whose name the kernel always shows, and treats a context
// neither in a memfd nor named as not published.) Every
// process read scans its maps for them, so only the lines that hold the
// name, or the permissions, offset, device and inode of such a mapping with
// no path, are parsed.
func Candidates(maps []byte) (named, unnamed []uint64) {
	eachLineWith(maps, []byte(Signature), func(m procmaps.Mapping) {
		if isContextName(m.Path) {
			named = append(named, m.Start)
		}
	})
	// "start-limit r--p 00000000 00:00 0" and nothing after: checked at
	// the line's fixed places. A search for the pattern across the listing
	// starts a comparison at every space; it made the whole scan 3.5 times
	// slower (BenchmarkReadProcessWithoutContext).
	unnamedFields := []byte("r--p 00000000 00:00 0")
	for rest := maps; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || !bytes.HasPrefix(line[sp+1:], unnamedFields) ||
			len(bytes.TrimRight(line[sp+1+len(unnamedFields):], " ")) != 0 {
			continue
		}
		if m, err := procmaps.ParseLine(line); err == nil && m.Limit-m.Start <= maxUnnamed {
			unnamed = append(unnamed, m.Start)
		}
	}
	return named, unnamed
}

// eachLineWith calls f with each line of maps that contains needle, parsed.
func eachLineWith(maps, needle []byte, f func(procmaps.Mapping)) {
	for off := 0; ; {
		i := bytes.Index(maps[off:], needle)
		if i < 0 {
			return
		}
		i += off
		start := bytes.LastIndexByte(maps[:i], '\n') + 1
		end := bytes.IndexByte(maps[i:], '\n')
		if end < 0 {
			end = len(maps)
		} else {
			end += i
		}
		if m, err := procmaps.ParseLine(maps[start:end]); err == nil {
			f(m)
		}
		if end >= len(maps) {
			return
		}
		off = end + 1
	}
}

// isContextName: the OTEP's readers look for mappings whose name starts
// with one of these names, for what the kernel appends: a memfd whose
// descriptor the publisher closed reads "/memfd:OTEL_CTX (deleted)"
// (procmaps takes that suffix off). Another word ("/memfd:OTEL_CTX_OTHER")
// is another name.
func isContextName(path string) bool {
	for _, name := range []string{"/memfd:" + Signature, "[anon:" + Signature + "]", "[anon_shmem:" + Signature + "]"} {
		if path == name || strings.HasPrefix(path, name+" ") {
			return true
		}
	}
	return false
}

// ReadProcess reads the context of the process whose /proc directory is
// procDir, given its maps listing: ErrNotPublished when it has none.
func ReadProcess(procDir string, maps []byte) (Resource, error) {
	named, unnamed := Candidates(maps)
	if len(named) == 0 && len(unnamed) == 0 {
		return Resource{}, ErrNotPublished
	}
	mem, err := os.Open(filepath.Join(procDir, "mem"))
	if err != nil {
		return Resource{}, fmt.Errorf("read process context: %w", err)
	}
	defer mem.Close()
	var errs []error
	for _, addr := range named {
		r, err := Read(mem, addr)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	for _, addr := range unnamed {
		r, err := Read(mem, addr)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ErrNotPublished) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return Resource{}, ErrNotPublished
	}
	return Resource{}, errors.Join(errs...)
}

// ReadAtIfNew reads the context whose header is at addr in the process
// whose /proc directory is procDir, unless its publication time is still
// known (ErrUnchanged): a check for an SDK's update costs one read of the
// header.
func ReadAtIfNew(procDir string, addr, known uint64) (Resource, error) {
	mem, err := os.Open(filepath.Join(procDir, "mem"))
	if err != nil {
		return Resource{}, fmt.Errorf("read process context: %w", err)
	}
	defer mem.Close()
	var hdr [headerSize]byte
	if err := readFull(mem, hdr[:], addr); err == nil && string(hdr[:8]) == Signature &&
		binary.LittleEndian.Uint64(hdr[16:]) == known {
		return Resource{}, ErrUnchanged
	}
	return Read(mem, addr)
}

// Read reads the context whose header is at addr in mem (a process's
// memory), following the OTEP's reading protocol: the header, then the
// payload it points to, then the header's publication time again; a time
// that is 0 or changed means the publisher was updating it, and the read
// starts over (a few times at most).
func Read(mem io.ReaderAt, addr uint64) (Resource, error) {
	var hdr [headerSize]byte
	for range attempts {
		if err := readFull(mem, hdr[:], addr); err != nil {
			return Resource{}, fmt.Errorf("read process context header at %#x: %w", addr, err)
		}
		if string(hdr[:8]) != Signature {
			return Resource{}, fmt.Errorf("%w at %#x", ErrNotPublished, addr)
		}
		if v := binary.LittleEndian.Uint32(hdr[8:]); v != Version {
			return Resource{}, fmt.Errorf("process context at %#x has version %d; this agent reads version %d", addr, v, Version)
		}
		size := binary.LittleEndian.Uint32(hdr[12:])
		published := binary.LittleEndian.Uint64(hdr[16:])
		payloadAt := binary.LittleEndian.Uint64(hdr[24:])
		if published == 0 {
			continue // being updated
		}
		if size == 0 || size > MaxPayload {
			return Resource{}, fmt.Errorf("process context at %#x: payload of %d bytes, want 1 to %d", addr, size, MaxPayload)
		}
		payload := make([]byte, size)
		if err := readFull(mem, payload, payloadAt); err != nil {
			return Resource{}, fmt.Errorf("read process context payload at %#x: %w", payloadAt, err)
		}
		var again [8]byte
		if err := readFull(mem, again[:], addr+16); err != nil {
			return Resource{}, fmt.Errorf("read process context header at %#x: %w", addr, err)
		}
		if binary.LittleEndian.Uint64(again[:]) != published {
			continue // updated while read
		}
		attrs, err := DecodePayload(payload)
		if err != nil {
			return Resource{}, fmt.Errorf("process context at %#x: %w", addr, err)
		}
		return Resource{Address: addr, PublishedAt: published, Attributes: attrs}, nil
	}
	return Resource{}, fmt.Errorf("process context at %#x: still being updated after %d reads", addr, attempts)
}

func readFull(mem io.ReaderAt, buf []byte, addr uint64) error {
	if addr > 1<<63-1 {
		return fmt.Errorf("address %#x out of range", addr)
	}
	_, err := mem.ReadAt(buf, int64(addr))
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// DecodePayload decodes a context's payload and returns its resource's
// string-valued attributes (DecodeResource). The OTEP's payload is a
// ProcessContext: the Resource in field 1, extra attributes for readers in
// field 2 (not used here). Its reference implementation wrote the Resource
// alone until 2026-02, under the same header version; such a payload, which
// does not decode as a ProcessContext with attributes, is read as one.
func DecodePayload(b []byte) (map[string]string, error) {
	// A message field that occurs more than once is merged, as protobuf
	// does: its occurrences read as one.
	var resource []byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == 1 && typ == protowire.BytesType { // ProcessContext.resource
			resource = append(resource, v...)
		}
		return nil
	})
	var attrs map[string]string
	if err == nil {
		attrs, err = DecodeResource(resource)
	}
	if err == nil && len(attrs) > 0 {
		return attrs, nil
	}
	if bare, bareErr := DecodeResource(b); bareErr == nil && len(bare) > 0 {
		return bare, nil
	}
	if err != nil {
		return nil, fmt.Errorf("decode process context: %w", err)
	}
	return attrs, nil
}

// DecodeResource decodes an encoded opentelemetry.proto.resource.v1.Resource
// and returns its string-valued attributes. An attribute whose key or value
// is empty, not valid UTF-8, or too long is left out, as are attributes past the
// first 128; a payload that is not a well-formed Resource is an error.
func DecodeResource(b []byte) (map[string]string, error) {
	attrs := map[string]string{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType { // Resource.attributes
			return nil
		}
		key, value, ok, err := decodeKeyValue(v)
		if err != nil {
			return fmt.Errorf("attribute: %w", err)
		}
		if ok && len(attrs) < maxAttributes {
			attrs[key] = value
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decode resource: %w", err)
	}
	return attrs, nil
}

// decodeKeyValue decodes a KeyValue; ok is false for a value that is not
// a string (or not a usable one).
func decodeKeyValue(b []byte) (key, value string, ok bool, err error) {
	var hasValue bool
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType: // KeyValue.key
			key = string(v)
		case num == 2 && typ == protowire.BytesType: // KeyValue.value: AnyValue
			value, hasValue = "", false
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num == 1 && typ == protowire.BytesType { // AnyValue.string_value
					value, hasValue = string(v), true
				}
				return nil
			})
		}
		return nil
	})
	// An empty value says nothing: the reference implementation publishes
	// "" for each of its fields the application left unset.
	ok = err == nil && hasValue && key != "" && value != "" && len(key) <= maxKey && len(value) <= maxValue &&
		utf8.ValidString(key) && utf8.ValidString(value) && !strings.ContainsFunc(key+value, isControl)
	return key, value, ok, err
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// eachField calls f with each field of the message b (the contents of
// length-delimited fields; nil for the others).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}
