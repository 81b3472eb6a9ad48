// Package cpulist reads the kernel's lists of CPUs ("0-3,5,7-8"): the
// receiver opens a perf event on each online CPU, and tests check what was
// sized by their count.
package cpulist

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

const onlinePath = "/sys/devices/system/cpu/online"

// Online is the online CPUs, as the kernel lists them.
func Online() ([]int, error) {
	b, err := os.ReadFile(onlinePath)
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	cpus, err := Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", onlinePath, err)
	}
	return cpus, nil
}

// Parse reads a CPU list ("0-1,4,6-7") into its CPUs, in order.
func Parse(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty CPU list")
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu %q: %w", part, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu range %q: %w", part, err)
			}
		}
		if first < 0 || last < first {
			return nil, fmt.Errorf("cpu range %q: invalid", part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
