//go:build privileged

package hotspot

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// openJVMCodeCache opens the code cache of the running JVM pid, its
// scopes kept within budget.
func openJVMCodeCache(t testing.TB, pid int, budget *ScopeBudget) *CodeCache {
	t.Helper()
	raw, err := procmaps.Read("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := procmaps.ParseExecutable(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if filepath.Base(m.Path) == "libjvm.so" {
			c, err := OpenCodeCache("/proc", pid, Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, Path: m.Path}, budget)
			if err != nil {
				t.Fatalf("open the code cache: %v", err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
	}
	t.Fatalf("pid %d maps no libjvm.so", pid)
	return nil
}

// perfMapEntry is one line of a perf map.
type perfMapEntry struct {
	start, size uint64
	name        string
}

func readPerfMap(t testing.TB, path string) []perfMapEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []perfMapEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 3)
		if len(fields) != 3 {
			t.Fatalf("perf map line %q", sc.Text())
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(fields[0], "0x"), 16, 64)
		size, err2 := strconv.ParseUint(strings.TrimPrefix(fields[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil || size == 0 {
			t.Fatalf("perf map line %q", sc.Text())
		}
		out = append(out, perfMapEntry{start, size, fields[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCodeCacheNamesAsThePerfMap: for each JDK installed, the code cache
// read from the JVM's memory names the first, a middle and the last byte
// of every piece of code the JVM's own perf map lists (written by the
// JDK's jcmd just before) as the map names it: compiled methods
// ("long Busy.spin(long)"), the interpreter, stubs and adapters. Code the
// JIT replaced between the map and the reads may differ: at most 1 %.
func TestCodeCacheNamesAsThePerfMap(t *testing.T) {
	for _, java := range testworkload.JDKs(t) {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(java))), func(t *testing.T) {
			cmd := startJVM(t, java, nil)
			pid := cmd.Process.Pid
			mapPath := fmt.Sprintf("/tmp/perf-%d.map", pid)
			os.Remove(mapPath) // an earlier process's with this pid
			if out, err := exec.Command(filepath.Join(filepath.Dir(java), "jcmd"), strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
				t.Fatalf("jcmd Compiler.perfmap: %v\n%s", err, out)
			}
			entries := readPerfMap(t, mapPath)
			opened := time.Now()
			budget := NewScopeBudget(1 << 20)
			c := openJVMCodeCache(t, pid, budget)
			// A second reader with no room for scopes reads them at each
			// lookup, and must find the same.
			unkept := openJVMCodeCache(t, pid, NewScopeBudget(0))
			openTook := time.Since(opened)
			looked := time.Now()
			// inlined: lookups that found methods inlined into the compiled one.
			var lookups, differ, spin, inlined int
			var examples []string
			for _, e := range entries {
				for _, pc := range []uint64{e.start, e.start + e.size/2, e.start + e.size - 1} {
					lookups++
					frames, in, err := c.Frames(pc)
					name := ""
					if len(frames) > 0 {
						name = frames[len(frames)-1].Function // the compiled method itself
					}
					if len(frames) > 1 {
						inlined++
					}
					if again, _, _ := unkept.Frames(pc); fmt.Sprint(again) != fmt.Sprint(frames) {
						t.Errorf("%#x: %v, without scopes kept %v", pc, frames, again)
					}
					if name == hiddenName(e.name) {
						if strings.Contains(name, "Busy.spin(") {
							spin++
						}
						continue
					}
					differ++
					if len(examples) < 10 {
						examples = append(examples, fmt.Sprintf("%#x: map %q, code cache %q (in the code cache: %v, %v)", pc, e.name, name, in, err))
					}
				}
			}
			// Reported, not held to anything: what the agent pays once per
			// JVM and per new code address.
			t.Logf("%d pieces of code in the map, %d lookups, %d differ, %d in Busy.spin, %d with inlined methods; open %v, %v a lookup",
				len(entries), lookups, differ, spin, inlined, openTook, time.Since(looked)/time.Duration(lookups))
			if inlined == 0 {
				t.Errorf("no lookup found a method inlined into another")
			}
			if budget.Used() == 0 || budget.Used() > 1<<20 {
				t.Errorf("scopes kept: %d bytes, want some within the budget of 1 MiB", budget.Used())
			}
			c.Close()
			if budget.Used() != 0 {
				t.Errorf("scopes kept after Close: %d bytes", budget.Used())
			}
			if len(entries) < 100 {
				t.Fatalf("only %d pieces of code in the map", len(entries))
			}
			if spin == 0 {
				t.Errorf("no address named long Busy.spin(long)")
			}
			if differ*100 > lookups {
				t.Errorf("%d of %d lookups differ from the map:\n%s", differ, lookups, strings.Join(examples, "\n"))
			}
			// Outside the code cache: not in it, no error.
			if frames, in, err := c.Frames(8); in || err != nil || frames != nil {
				t.Errorf("address 8: %v %v %v, want not in the code cache", frames, in, err)
			}
		})
	}
}

// hiddenName is a perf map's name with its hidden classes named as the
// code cache names them (hiddenClass): "… LambdaForm$MH+<hidden>.invoke(…)".
func hiddenName(name string) string {
	open := strings.IndexByte(name, '(')
	sp := strings.IndexByte(name, ' ')
	if open < 0 || sp < 0 || sp > open {
		return name
	}
	qualified := name[sp+1 : open]
	dot := strings.LastIndexByte(qualified, '.')
	if dot < 0 {
		return name
	}
	return name[:sp+1] + hiddenClass(qualified[:dot]) + qualified[dot:] + name[open:]
}

// TestOpenCodeCacheNotAJVM: a process without libjvm.so's description is
// refused with an error, whatever it maps at the place given.
func TestOpenCodeCacheNotAJVM(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenCodeCache("/proc", os.Getpid(), Mapping{Start: 0x400000, Limit: 0x401000, Path: self}, NewScopeBudget(1<<20))
	if err == nil || !strings.Contains(err.Error(), "gHotSpotVM") {
		t.Fatalf("err = %v, want one naming the missing gHotSpotVM symbols", err)
	}
}

// BenchmarkCodeCacheFrames is what a drain pays per JIT code address it
// has not named yet in that drain (names and scopes kept from earlier
// drains): the middle byte of each piece of code in the JVM's perf map.
func BenchmarkCodeCacheFrames(b *testing.B) {
	cmd := startJava(b)
	pid := cmd.Process.Pid
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", pid)
	b.Cleanup(func() { os.Remove(mapPath) })
	if out, err := exec.Command("jcmd", strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
		b.Fatalf("jcmd Compiler.perfmap: %v\n%s", err, out)
	}
	entries := readPerfMap(b, mapPath)
	c := openJVMCodeCache(b, pid, NewScopeBudget(1<<20))
	b.ResetTimer()
	for b.Loop() {
		for _, e := range entries {
			if _, _, err := c.Frames(e.start + e.size/2); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(entries)), "ns/address")
}
