package ebpfprofilereceiver

import (
	"testing"

	"github.com/hotpath-dev/hotpath/internal/readmetest"
)

// TestReadmeExample decodes the README's YAML example the way the collector
// does, and validates it.
func TestReadmeExample(t *testing.T) {
	for id, cfg := range readmetest.Check(t, "README.md", "receivers", NewFactory()) {
		if c := cfg.(*Config); c.FrequencyHz != 19 || len(c.ServiceNameRules) != 1 || len(c.Exclude.Executables) != 1 {
			t.Errorf("%s: the example's settings did not arrive: %+v", id, c)
		}
	}
}
