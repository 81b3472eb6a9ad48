// Package procstat reads what the kernel accounts for one process: CPU time
// (/proc/PID/stat), resident memory (/proc/PID/status) and the memory of the
// BPF maps it holds (/proc/PID/fdinfo). These are the independent
// measurements the bench suite reports the agent's cost from.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports (the kernel fixes it for
// user space whatever CONFIG_HZ is).
const clockTicks = 100

// CPUTime is the CPU time (user + system) process pid has used so far.
func CPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of pid %d: %w", pid, err)
	}
	return parseStatCPU(raw)
}

// parseStatCPU takes utime and stime (fields 14 and 15) from a stat line.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(raw []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, fmt.Errorf("parse /proc/PID/stat: no ')' after the command name")
	}
	fields := strings.Fields(string(raw[end+1:]))
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("parse /proc/PID/stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/PID/stat cpu field %q: %w", f, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// Memory is a process's resident memory now and at its peak. RSS counts
// file-backed pages too (the binary's text, mmapped symbol tables), which
// the kernel can drop under pressure; Anon is the part only swap can free.
type Memory struct {
	RSS  uint64 // VmRSS, bytes
	Peak uint64 // VmHWM (high-water mark of RSS), bytes
	Anon uint64 // RssAnon, bytes
	File uint64 // RssFile, bytes
}

// ReadMemory reads VmRSS and VmHWM of pid.
func ReadMemory(pid int) (Memory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return parseStatus(raw)
}

func parseStatus(raw []byte) (Memory, error) {
	var m Memory
	var haveRSS, havePeak bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch key {
		case "VmRSS":
			dst, haveRSS = &m.RSS, true
		case "VmHWM":
			dst, havePeak = &m.Peak, true
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		kb, err := parseKB(val)
		if err != nil {
			return Memory{}, fmt.Errorf("parse /proc/PID/status %s: %w", key, err)
		}
		*dst = kb * 1024
	}
	if !haveRSS || !havePeak {
		return Memory{}, fmt.Errorf("parse /proc/PID/status: VmRSS or VmHWM missing (kernel thread or zombie?)")
	}
	return m, nil
}

// parseKB parses "   1234 kB".
func parseKB(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("want \"<n> kB\", got %q", strings.TrimSpace(s))
	}
	return strconv.ParseUint(f[0], 10, 64)
}

// BPFMaps is what the BPF maps a process holds cost.
type BPFMaps struct {
	Count   int      // distinct maps (by map_id)
	Memlock uint64   // bytes the kernel charges for them
	IDs     []uint64 // their map_id, in fd order
}

// ReadBPFMaps sums the memlock of every BPF map pid has an fd for. A map
// reachable through several fds is counted once.
func ReadBPFMaps(pid int) (BPFMaps, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return BPFMaps{}, fmt.Errorf("list bpf maps of pid %d: %w", pid, err)
	}
	seen := map[uint64]bool{}
	var out BPFMaps
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // fd closed while we looked
		}
		id, memlock, ok := parseMapFdinfo(raw)
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		out.Count++
		out.Memlock += memlock
		out.IDs = append(out.IDs, id)
	}
	return out, nil
}

// parseMapFdinfo returns map_id and memlock when the fdinfo is a BPF map's.
func parseMapFdinfo(raw []byte) (id, memlock uint64, ok bool) {
	f := fdinfoNumbers(raw)
	_, isMap := f["map_type"]
	id, haveID := f["map_id"]
	memlock, haveMemlock := f["memlock"]
	return id, memlock, isMap && haveID && haveMemlock
}

// BPFProgram is one BPF program a process holds and what the kernel
// accounted for it. RunTimeNs and RunCount only grow while
// kernel.bpf_stats_enabled is 1 (or a BPF_ENABLE_STATS fd is open); the
// time is spent in the context of whatever process the program ran on
// (for a perf_event program: the sampled one), not in the holder's.
type BPFProgram struct {
	ID        uint64
	Type      uint64 // prog_type (7: perf_event)
	RunTimeNs uint64
	RunCount  uint64
}

// ReadBPFPrograms lists the BPF programs pid has an fd for, each once.
func ReadBPFPrograms(pid int) ([]BPFProgram, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list bpf programs of pid %d: %w", pid, err)
	}
	seen := map[uint64]bool{}
	var out []BPFProgram
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // fd closed while we looked
		}
		p, ok := parseProgFdinfo(raw)
		if !ok || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	return out, nil
}

// parseProgFdinfo reads a BPF program's fdinfo; run_time_ns and run_cnt
// are missing before Linux 5.8 and read as 0.
func parseProgFdinfo(raw []byte) (BPFProgram, bool) {
	f := fdinfoNumbers(raw)
	typ, isProg := f["prog_type"]
	id, haveID := f["prog_id"]
	return BPFProgram{ID: id, Type: typ, RunTimeNs: f["run_time_ns"], RunCount: f["run_cnt"]}, isProg && haveID
}

// fdinfoNumbers returns the numeric "key:\tvalue" lines of an fdinfo file.
func fdinfoNumbers(raw []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		key, val, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		if v, ok := parseUint(strings.TrimSpace(val)); ok {
			out[key] = v
		}
	}
	return out
}

func parseUint(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}
