// Package procinfo reads what a profile's resource says about a process from
// /proc: executable, the service it belongs to, and its container.
package procinfo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
	"github.com/hotpath-dev/hotpath/internal/procfile"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// Info describes one process.
type Info struct {
	PID     int
	ExePath string // as the process sees it (inside its mount namespace)
	ExeName string
	// App is the program an interpreter's process runs (a Python script
	// or module, a jar or main class, a Node.js package or script, a .NET
	// assembly), for its service; "" for other executables.
	App        string
	Comm       string
	EnvService string // OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES
	Container  cgroupattr.Container
	// StartTime is when the process started, in clock ticks after boot
	// (field 22 of /proc/PID/stat): with the PID it names one process, so
	// a reused PID is told apart from the process that had it before.
	StartTime uint64
}

// Read collects Info for pid below procRoot ("/proc" in production). A
// process that is gone yields an error; a process whose environment cannot be
// read (kernel threads, permission) yields what could be read.
//
// startTime, when not 0, is the process's start time as the kernel reported
// it with the event that asked for the read. /proc/PID/stat, the costliest of
// a process's files to read (the kernel gathers every thread's times for it),
// is then read only when there is no executable to name the process (kernel
// threads, a process on its way out), and Comm is set only then.
func Read(procRoot string, pid int, startTime uint64) (Info, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	info := Info{PID: pid, StartTime: startTime}
	if startTime == 0 {
		comm, start, err := ReadStat(procRoot, pid)
		if err != nil {
			return info, err
		}
		info.Comm, info.StartTime = comm, start
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		info.ExePath, _ = procmaps.TrimDeleted(exe)
		info.ExeName = filepath.Base(info.ExePath)
		switch {
		case strings.HasPrefix(info.ExePath, memfdPrefix):
			// A program run from memory (fexecve of a memfd: runc's
			// clone of itself, sandboxes, self-extracting tools) has no
			// file name: its path is the memfd's label, whose base is
			// "exe" for runc and a per-run hash for some, and its comm
			// is that label too. The name it was started as is the
			// stable one.
			if args := readArgs(dir); len(args) > 0 && args[0] != "" {
				info.ExeName = filepath.Base(args[0])
			}
		case isInterpreter(info.ExeName):
			// Only interpreters' command lines are read: a process read
			// is paid for every process a busy node starts.
			info.App = appName(info.ExeName, readArgs(dir), procFiles(dir))
		}
	} else {
		if startTime != 0 { // stat not read above
			// Also how a process that is gone shows (no executable,
			// then no stat).
			comm, _, err := ReadStat(procRoot, pid)
			if err != nil {
				return info, err
			}
			info.Comm = comm
		}
		// Kernel threads have no executable; their comm is their name.
		info.ExeName = info.Comm
	}
	if env, err := procfile.ReadFile(filepath.Join(dir, "environ")); err == nil {
		info.EnvService = serviceFromEnviron(env)
	}
	if c, err := cgroupattr.Read(procRoot, pid); err == nil {
		info.Container = c
	}
	return info, nil
}

// ReadStat returns the command name and start time of pid from
// procRoot/PID/stat; an error when the process is gone.
func ReadStat(procRoot string, pid int) (comm string, startTime uint64, err error) {
	st, err := procfile.ReadStat(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	return st.Comm, st.StartTime, nil
}

// memfdPrefix starts the executable path of a process run from a memfd
// ("/memfd:NAME (deleted)").
const memfdPrefix = "/memfd:"

// readArgs is the process's command line, or nil when it cannot be read
// or is empty (a process on its way out).
func readArgs(dir string) []string {
	cmdline, err := procfile.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
}

// procFiles are a live process's files (processFiles), by its /proc/PID
// directory: read inside its root (a container's image), symlinks and ".."
// kept within it.
type procFiles string

func (d procFiles) Abs(path string) string { return procfile.InProcess(string(d), path) }

// ReadFile reads a regular file of at most 1 MiB (package.json).
func (d procFiles) ReadFile(abs string) ([]byte, error) {
	return procfile.ReadRegularInRoot(string(d), abs, 1<<20)
}

func serviceFromEnviron(env []byte) string {
	var fromAttrs string
	for _, kv := range bytes.Split(env, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "OTEL_SERVICE_NAME":
			if len(v) > 0 {
				return string(v) // takes precedence, as in the OTel SDKs
			}
		case "OTEL_RESOURCE_ATTRIBUTES":
			for _, attr := range strings.Split(string(v), ",") {
				if name, ok := strings.CutPrefix(strings.TrimSpace(attr), "service.name="); ok {
					fromAttrs = name
				}
			}
		}
	}
	return fromAttrs
}
