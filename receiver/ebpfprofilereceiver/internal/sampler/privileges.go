//go:build linux

package sampler

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Capability bit numbers (linux/capability.h).
const (
	capDACReadSearch = 2
	capSysPtrace     = 19
	capSyslog        = 34
	capSysAdmin      = 21
	capPerfmon       = 38
	capBPF           = 39
)

const btfPath = "/sys/kernel/btf/vmlinux"

// ErrPermission marks errors caused by missing privileges; test with
// errors.Is.
var ErrPermission = errors.New("insufficient privileges")

// CheckPrivileges reports, in one readable sentence, why this process cannot
// run the sampler: missing CAP_BPF/CAP_PERFMON, perf events refused, or no
// kernel BTF (needed for process lifecycle events). nil means it can.
func CheckPrivileges() error {
	if err := checkCapabilities(); err != nil {
		return err
	}
	// Open (and close) one real event: containers and LSMs can refuse
	// perf_event_open even to root.
	fd, err := openCPUClock(0, DefaultFrequencyHz, true)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if _, err := os.Stat(btfPath); err != nil {
		return fmt.Errorf("kernel BTF not found at %s: use a kernel built with CONFIG_DEBUG_INFO_BTF=y (needed for process exec/exit events): %w", btfPath, err)
	}
	return nil
}

// checkCapabilities needs CAP_BPF (load programs and maps) and CAP_PERFMON
// (perf events, stack traces); CAP_SYS_ADMIN grants both on older kernels.
func checkCapabilities() error {
	eff, err := effectiveCapabilities()
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return fmt.Errorf("%w: missing %s: run as root or grant CAP_BPF and CAP_PERFMON (e.g. setcap cap_bpf,cap_perfmon+ep, or the container's securityContext.capabilities.add)",
		ErrPermission, strings.Join(missing, " and "))
}

// MissingCapability is a capability the agent runs without, and what it
// loses for lack of it.
type MissingCapability struct {
	Name  string // e.g. "CAP_SYS_PTRACE"
	Loses string // one sentence
}

// MissingReadCapabilities lists the capabilities, beyond CAP_BPF and
// CAP_PERFMON, that the agent needs to read other users' processes and
// that this process lacks (docs/security.md). It runs without them, but
// must say what is missing instead of silently reporting less. CAP_SYSLOG
// is judged by reading kallsyms instead (a sysctl can make it unnecessary).
func MissingReadCapabilities() ([]MissingCapability, error) {
	eff, err := effectiveCapabilities()
	if err != nil {
		return nil, fmt.Errorf("read capabilities: %w", err)
	}
	var missing []MissingCapability
	if eff&(1<<capSysPtrace) == 0 {
		missing = append(missing, MissingCapability{"CAP_SYS_PTRACE",
			"the memory maps and executables of other users' processes cannot be read: their user frames are not symbolized"})
	}
	if eff&(1<<capDACReadSearch) == 0 {
		missing = append(missing, MissingCapability{"CAP_DAC_READ_SEARCH",
			"the environment (OTEL_SERVICE_NAME) of other users' processes cannot be read, nor binaries in directories this user may not search: their service falls back to the executable name, and such binaries get no build ID"})
	}
	return missing, nil
}

func effectiveCapabilities() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// openCPUClock opens a PERF_COUNT_SW_CPU_CLOCK sampling event on one CPU in
// frequency mode (the kernel adjusts the period to hit hz).
func openCPUClock(cpu, hz int, disabled bool) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq,
	}
	if disabled {
		attr.Bits |= unix.PerfBitDisabled
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open perf event on cpu %d: %w", cpu, explainPerfError(err, hz))
	}
	return fd, nil
}

func explainPerfError(err error, hz int) error {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w: run as root or grant CAP_PERFMON, or lower kernel.perf_event_paranoid (now %s)",
			ErrPermission, err, readSysctl("kernel/perf_event_paranoid"))
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: %d Hz may exceed kernel.perf_event_max_sample_rate (%s)",
			err, hz, readSysctl("kernel/perf_event_max_sample_rate"))
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: the kernel lacks software perf events (CONFIG_PERF_EVENTS)", err)
	}
	return err
}

// explainLoadError turns EPERM from loading BPF into a readable sentence.
func explainLoadError(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: %w: run as root or grant CAP_BPF and CAP_PERFMON (and check kernel.unprivileged_bpf_disabled / LSM policy)", ErrPermission, err)
	}
	return err
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func maxSampleRate() (int, error) {
	return strconv.Atoi(readSysctl("kernel/perf_event_max_sample_rate"))
}
