//go:build linux

package tracectx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// DefaultBPFFS is where bpffs is mounted on most distributions.
const DefaultBPFFS = "/sys/fs/bpf"

// PinDir is the folder under bpffs that holds the maps shared between
// OpenTelemetry eBPF tools (traces_ctx_v1 lives at $BPFFS/otel/traces_ctx_v1).
const PinDir = "otel"

// ThreadMapName is the shared map's name, also its pin file name.
const ThreadMapName = "traces_ctx_v1"

// Maps are the trace context maps: Threads (traces_ctx_v1, pinned, shared
// with other tools) and Goroutines (go_traces, this agent's own).
type Maps struct {
	Threads    *ebpf.Map
	Goroutines *ebpf.Map
	// PinPath is where Threads is pinned.
	PinPath string
	// Created is true when this call created and pinned Threads; false
	// when another process (an earlier agent, OBI) had pinned it already.
	Created bool
}

// OpenMaps opens the pinned traces_ctx_v1 under bpffs, creating and pinning
// it when nobody has yet, and creates go_traces. bpffs is mounted when it is
// not (and this process may); otherwise the error says what to do.
func OpenMaps(bpffs string) (*Maps, error) {
	if bpffs == "" {
		bpffs = DefaultBPFFS
	}
	if err := ensureBPFFS(bpffs); err != nil {
		return nil, err
	}
	dir := filepath.Join(bpffs, PinDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create pin folder %s: %w", dir, err)
	}
	spec, err := loadTraceCtx()
	if err != nil {
		return nil, fmt.Errorf("load trace context BPF spec: %w", err)
	}
	pin := filepath.Join(dir, ThreadMapName)
	_, statErr := os.Stat(pin)
	existed := statErr == nil

	threadSpec := spec.Maps[traceCtxMapTracesCtxV1]
	threads, err := ebpf.NewMapWithOptions(threadSpec, ebpf.MapOptions{PinPath: dir})
	if errors.Is(err, os.ErrExist) {
		// Another tool pinned it between our lookup and our pin: use theirs.
		existed = true
		threads, err = ebpf.NewMapWithOptions(threadSpec, ebpf.MapOptions{PinPath: dir})
	}
	if err != nil {
		if existed {
			return nil, fmt.Errorf("open pinned map %s (made by another tool with a different layout? expected LRU hash, key 8 bytes, value 24 bytes, %d entries): %w",
				pin, threadSpec.MaxEntries, err)
		}
		return nil, fmt.Errorf("create and pin map %s: %w", pin, err)
	}
	goroutines, err := ebpf.NewMap(spec.Maps[traceCtxMapGoTraces])
	if err != nil {
		threads.Close()
		return nil, fmt.Errorf("create map go_traces: %w", err)
	}
	return &Maps{Threads: threads, Goroutines: goroutines, PinPath: pin, Created: !existed}, nil
}

// Close releases this process's handles. The pinned map stays for the other
// tools (and the next agent) that use it.
func (m *Maps) Close() error {
	if m == nil {
		return nil
	}
	return errors.Join(m.Threads.Close(), m.Goroutines.Close())
}

// ensureBPFFS checks that path is a bpffs mount and mounts one when it is
// not and this process is root.
func ensureBPFFS(path string) error {
	var st unix.Statfs_t
	err := unix.Statfs(path, &st)
	if err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("check bpffs at %s: %w", path, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("bpffs is not mounted at %s and this process is not root: mount it (mount -t bpf bpf %s) or set trace_context.bpffs to a bpffs mount", path, path)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("create bpffs mount point %s: %w", path, err)
	}
	if err := unix.Mount("bpf", path, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("bpffs is not mounted at %s and mounting it failed (mount -t bpf bpf %s): %w", path, path, err)
	}
	return nil
}
