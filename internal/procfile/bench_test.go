package procfile

import (
	"os"
	"testing"
)

// go test -bench . ./internal/procfile: this package's reads against
// os.ReadFile, on this process's maps and environment.
func BenchmarkReadFile(b *testing.B) {
	for _, name := range []string{"maps", "environ"} {
		path := "/proc/self/" + name
		b.Run(name+"/procfile", func(b *testing.B) {
			for b.Loop() {
				if _, err := ReadFile(path); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/os", func(b *testing.B) {
			for b.Loop() {
				if _, err := os.ReadFile(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
