package processcontext

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/processcontext/processcontexttest"
)

func readProcess(t *testing.T, p *processcontexttest.Publisher) (Resource, error) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(p.Proc, "maps"))
	if err != nil {
		t.Fatal(err)
	}
	return ReadProcess(p.Proc, raw)
}

// TestReadPublishedContext reads what a real process published, found from
// its maps and at its address, then again after the process updated it:
// as the OTEP says today (a memfd, a ProcessContext payload), as its first
// reference implementation did (an anonymous mapping, named where the
// kernel can name it, and a bare Resource), and with the reference
// implementation itself (version 1.0.0), whose extra attributes are not
// the resource's.
func TestReadPublishedContext(t *testing.T) {
	bin := processcontexttest.Build(t)
	// What the reference implementation adds of its own.
	sdk := map[string]string{"telemetry.sdk.language": "c", "telemetry.sdk.version": "1.0.0", "telemetry.sdk.name": "otel_process_ctx"}
	for _, mode := range []string{"memfd", "anon", "ref"} {
		t.Run(mode, func(t *testing.T) {
			p := processcontexttest.Start(t, bin, nil, mode, "service.name=checkout", "service.version=1.4.2",
				"deployment.environment.name=prod", "service.instance.id=627cc493-f310-47de-96bd-71410b7dec09", "service.namespace=shop")
			addr := p.Say(t, "", "published")
			want := map[string]string{"service.name": "checkout", "service.version": "1.4.2", "service.namespace": "shop",
				"deployment.environment.name": "prod", "service.instance.id": "627cc493-f310-47de-96bd-71410b7dec09"}
			want2 := map[string]string{"service.name": "checkout", "service.version": "1.5.0"}
			if mode == "ref" {
				maps.Copy(want, sdk)
				maps.Copy(want2, sdk)
			}
			r, err := readProcess(t, p)
			if err != nil {
				t.Fatalf("ReadProcess: %v", err)
			}
			if !maps.Equal(r.Attributes, want) || r.PublishedAt == 0 {
				t.Errorf("ReadProcess = %+v, want %v", r, want)
			}
			if r.Address != addr {
				t.Errorf("found at %#x, published at %#x", r.Address, addr)
			}
			at, err := ReadAtIfNew(p.Proc, addr, 0)
			if err != nil || !maps.Equal(at.Attributes, want) || at.PublishedAt != r.PublishedAt {
				t.Errorf("ReadAtIfNew(%#x, 0) = %+v, %v; want %+v", addr, at, err, r)
			}
			if _, err := ReadAtIfNew(p.Proc, addr, r.PublishedAt); !errors.Is(err, ErrUnchanged) {
				t.Errorf("ReadAtIfNew(%#x, its publication) = %v, want ErrUnchanged", addr, err)
			}

			if got := p.Say(t, "service.name=checkout service.version=1.5.0", "updated"); got != addr {
				t.Fatalf("updated at %#x, published at %#x", got, addr)
			}
			if _, err := ReadAtIfNew(p.Proc, addr, r.PublishedAt); errors.Is(err, ErrUnchanged) {
				t.Error("ReadAtIfNew after the update: ErrUnchanged")
			}
			r2, err := readProcess(t, p)
			if err != nil || !maps.Equal(r2.Attributes, want2) || r2.PublishedAt == r.PublishedAt {
				t.Errorf("after the update: %+v, %v; want %v and a new publication time (was %d)", r2, err, want2, r.PublishedAt)
			}
		})
	}
}

// TestReadGoSDKPublication reads what hotpath's Go SDK publishes
// (tracectx.PublishResource): the SDK and this reader are written apart,
// from the OTEP, and must agree.
func TestReadGoSDKPublication(t *testing.T) {
	p := processcontexttest.Start(t, processcontexttest.BuildGo(t), nil, "service.name=checkout", "service.version=1.4.2")
	p.Say(t, "", "published")
	r, err := readProcess(t, p)
	want := map[string]string{"service.name": "checkout", "service.version": "1.4.2"}
	if err != nil || !maps.Equal(r.Attributes, want) {
		t.Fatalf("ReadProcess = %+v, %v; want %v", r, err, want)
	}
	p.Say(t, "service.name=checkout service.version=1.5.0 deployment.environment.name=prod", "updated")
	r2, err := readProcess(t, p)
	want2 := map[string]string{"service.name": "checkout", "service.version": "1.5.0", "deployment.environment.name": "prod"}
	if err != nil || !maps.Equal(r2.Attributes, want2) || r2.Address != r.Address || r2.PublishedAt <= r.PublishedAt {
		t.Errorf("after the update: %+v, %v; want %v in the same mapping, published later", r2, err, want2)
	}
}

func TestReadProcessWithoutContext(t *testing.T) {
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProcess("/proc/self", raw); !errors.Is(err, ErrNotPublished) {
		t.Errorf("ReadProcess(self) = %v, want ErrNotPublished", err)
	}
}

func TestCandidates(t *testing.T) {
	maps := strings.Join([]string{
		"55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234                       /usr/bin/app",
		"7f0000001000-7f0000003000 rw-s 00000000 00:01 2052                       /memfd:OTEL_CTX (deleted)",
		"7f0000004000-7f0000006000 r--p 00000000 00:00 0                          [anon:OTEL_CTX]",
		"7f0000007000-7f0000009000 rw-s 00000000 00:01 7                          [anon_shmem:OTEL_CTX]",
		"7f000000a000-7f000000b000 rw-s 00000000 00:01 9                          /memfd:OTEL_CTX_OTHER (deleted)",
		"7f000000c000-7f000000e000 r--p 00000000 00:00 0 ",
		"7f000000f000-7f0000020000 r--p 00000000 00:00 0",
		"7f0000021000-7f0000023000 rw-p 00000000 00:00 0",
		"7f0000024000-7f0000026000 r--p 00000000 00:00 0                          [anon:other]",
		"7f0000027000-7f0000029000 r--p 00000000 00:00 0",
		"7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]",
	}, "\n")
	named, unnamed := Candidates([]byte(maps))
	wantNamed := []uint64{0x7f0000001000, 0x7f0000004000, 0x7f0000007000}
	wantUnnamed := []uint64{0x7f000000c000, 0x7f0000027000}
	if fmt.Sprint(named) != fmt.Sprint(wantNamed) || fmt.Sprint(unnamed) != fmt.Sprint(wantUnnamed) {
		t.Errorf("Candidates = %x, %x; want %x, %x", named, unnamed, wantNamed, wantUnnamed)
	}
}

// memory is a process's memory for the protocol tests: bytes at base, and
// an optional hook that runs before each read (a publisher at work).
type memory struct {
	base   uint64
	b      []byte
	reads  int
	before func(m *memory, read int)
}

func (m *memory) ReadAt(p []byte, off int64) (int, error) {
	m.reads++
	if m.before != nil {
		m.before(m, m.reads)
	}
	o := uint64(off)
	if o < m.base || o-m.base+uint64(len(p)) > uint64(len(m.b)) {
		return 0, errors.New("input/output error")
	}
	return copy(p, m.b[o-m.base:]), nil
}

const base = 0x7f0000000000

// publish lays out a header at base and the payload 4096 bytes on.
func publish(payload []byte, published uint64) *memory {
	m := &memory{base: base, b: make([]byte, 4096+len(payload))}
	copy(m.b, Signature)
	binary.LittleEndian.PutUint32(m.b[8:], Version)
	binary.LittleEndian.PutUint32(m.b[12:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(m.b[16:], published)
	binary.LittleEndian.PutUint64(m.b[24:], base+4096)
	copy(m.b[4096:], payload)
	return m
}

func resource(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var any, pair []byte
		any = protowire.AppendTag(any, 1, protowire.BytesType)
		any = protowire.AppendString(any, kv[i+1])
		pair = protowire.AppendTag(pair, 1, protowire.BytesType)
		pair = protowire.AppendString(pair, kv[i])
		pair = protowire.AppendTag(pair, 2, protowire.BytesType)
		pair = protowire.AppendBytes(pair, any)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, pair)
	}
	return b
}

func TestReadFollowsTheProtocol(t *testing.T) {
	payload := resource("service.name", "checkout")
	t.Run("clean", func(t *testing.T) {
		r, err := Read(publish(payload, 7), base)
		if err != nil || r.PublishedAt != 7 || r.Attributes["service.name"] != "checkout" {
			t.Errorf("Read = %+v, %v", r, err)
		}
	})
	t.Run("updated while read", func(t *testing.T) {
		// The publisher replaces the payload between the first header
		// read and the payload's: the re-read of the time sees it, and
		// the second attempt reads the new payload.
		next := resource("service.name", "checkout-v2")
		m := publish(payload, 7)
		m.b = append(m.b, next...)
		m.before = func(m *memory, read int) {
			if read == 2 {
				binary.LittleEndian.PutUint32(m.b[12:], uint32(len(next)))
				binary.LittleEndian.PutUint64(m.b[24:], base+4096+uint64(len(payload)))
				binary.LittleEndian.PutUint64(m.b[16:], 8)
			}
		}
		r, err := Read(m, base)
		if err != nil || r.PublishedAt != 8 || r.Attributes["service.name"] != "checkout-v2" {
			t.Errorf("Read = %+v, %v; want the update", r, err)
		}
		if m.reads != 6 {
			t.Errorf("%d reads, want 6 (two attempts of header, payload, time)", m.reads)
		}
	})
	t.Run("update in progress", func(t *testing.T) {
		m := publish(payload, 0)
		if _, err := Read(m, base); err == nil || !strings.Contains(err.Error(), "being updated") {
			t.Errorf("Read = %v, want 'still being updated'", err)
		}
		if m.reads != attempts {
			t.Errorf("%d reads, want %d", m.reads, attempts)
		}
	})
	for _, tc := range []struct {
		name  string
		edit  func(b []byte)
		want  string
		isNot bool
	}{
		{"no signature", func(b []byte) { copy(b, "OTEL_CTY") }, "no process context", true},
		{"signature not written yet", func(b []byte) { copy(b, make([]byte, 8)) }, "no process context", true},
		{"version 1", func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 1) }, "version 1; this agent reads version 2", false},
		{"empty payload", func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 0) }, "payload of 0 bytes", false},
		{"payload too large", func(b []byte) { binary.LittleEndian.PutUint32(b[12:], MaxPayload+1) }, "payload of 65537 bytes", false},
		{"payload pointer outside memory", func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 0x10) }, "read process context payload at 0x10", false},
		{"payload pointer past int64", func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 1<<63) }, "out of range", false},
		{"payload not a ProcessContext", func(b []byte) { b[4096] = 0xff }, "decode process context", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := publish(payload, 7)
			tc.edit(m.b)
			_, err := Read(m, base)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotPublished) != tc.isNot {
				t.Errorf("Read = %v, want an error with %q (ErrNotPublished: %v)", err, tc.want, tc.isNot)
			}
		})
	}
	if _, err := Read(publish(payload, 7), base+1<<20); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("Read outside memory = %v, want a header read error", err)
	}
}

// TestDecodePayload: the OTEP's ProcessContext gives its Resource's
// attributes, not its extra attributes; a bare Resource (the reference
// implementation's payload until 2026-02) is read as one; what is neither
// is an error.
func TestDecodePayload(t *testing.T) {
	res := resource("service.name", "checkout", "service.version", "1.4.2")
	extra := protowire.AppendTag(nil, 2, protowire.BytesType)
	extra = protowire.AppendBytes(extra, resource("threadlocal.schema_version", "v1")[2:]) // a KeyValue
	wrapped := protowire.AppendTag(nil, 1, protowire.BytesType)
	wrapped = protowire.AppendBytes(wrapped, res)
	want := map[string]string{"service.name": "checkout", "service.version": "1.4.2"}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    map[string]string
		wantErr string
	}{
		{"ProcessContext", wrapped, want, ""},
		{"ProcessContext with extra attributes first", append(append([]byte{}, extra...), wrapped...), want, ""},
		{"ProcessContext with extra attributes after", append(append([]byte{}, wrapped...), extra...), want, ""},
		{"bare Resource", res, want, ""},
		{"ProcessContext without a resource", extra, map[string]string{}, ""},
		{"neither", []byte{0x0a, 0x7f, 0x0a}, nil, "decode process context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePayload(tc.payload)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("DecodePayload = %v, %v; want error %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("DecodePayload: %v", err)
			case !maps.Equal(got, tc.want):
				t.Errorf("DecodePayload = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecodeResource(t *testing.T) {
	var intValue, pairs []byte
	// "service.port" = 8080 as AnyValue.int_value: not a string, left out.
	intValue = protowire.AppendTag(intValue, 3, protowire.VarintType)
	intValue = protowire.AppendVarint(intValue, 8080)
	pairs = protowire.AppendTag(pairs, 1, protowire.BytesType)
	pairs = protowire.AppendString(pairs, "service.port")
	pairs = protowire.AppendTag(pairs, 2, protowire.BytesType)
	pairs = protowire.AppendBytes(pairs, intValue)
	withInt := protowire.AppendTag(nil, 1, protowire.BytesType)
	withInt = protowire.AppendBytes(withInt, pairs)
	// dropped_attributes_count, a field this reader does not use.
	withInt = protowire.AppendTag(withInt, 2, protowire.VarintType)
	withInt = protowire.AppendVarint(withInt, 3)

	many := []string{}
	for i := range 200 {
		many = append(many, fmt.Sprintf("k%03d", i), "v")
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    map[string]string
		wantErr string
	}{
		{"strings", resource("service.name", "a", "service.version", "1"), map[string]string{"service.name": "a", "service.version": "1"}, ""},
		{"other value types and fields", append(resource("service.name", "a"), withInt...), map[string]string{"service.name": "a"}, ""},
		{"invalid UTF-8", resource("service.name", "a\xff", "ok", "b"), map[string]string{"ok": "b"}, ""},
		{"control characters", resource("service.name", "a\nb", "ok", "b"), map[string]string{"ok": "b"}, ""},
		{"empty key", resource("", "a"), map[string]string{}, ""},
		{"empty value", resource("service.version", "", "service.name", "a"), map[string]string{"service.name": "a"}, ""},
		{"value too long", resource("service.name", strings.Repeat("x", maxValue+1)), map[string]string{}, ""},
		{"too many attributes", resource(many...), nil, ""},
		{"truncated", resource("service.name", "checkout")[:10], nil, "decode resource"},
		{"bad tag", []byte{0x00}, nil, "decode resource"},
		{"length past the end", []byte{0x0a, 0x7f, 0x0a}, nil, "decode resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResource(tc.payload)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("DecodeResource = %v, %v; want error %q", got, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("DecodeResource: %v", err)
			case tc.want == nil:
				if len(got) != maxAttributes {
					t.Errorf("%d attributes, want the first %d", len(got), maxAttributes)
				}
			case !maps.Equal(got, tc.want):
				t.Errorf("DecodeResource = %v, want %v", got, tc.want)
			}
		})
	}
}
