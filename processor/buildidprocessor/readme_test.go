package buildidprocessor

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"
)

// TestReadmeExample decodes every buildid config in README.md's YAML
// example the way the collector does, and validates it.
func TestReadmeExample(t *testing.T) {
	for name, conf := range readmeProcessors(t, "README.md", Type.String()) {
		cfg := NewFactory().CreateDefaultConfig().(*Config)
		if err := conf.Unmarshal(cfg); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func readmeProcessors(t *testing.T, path, typ string) map[string]*confmap.Conf {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("README has no yaml example")
	}
	block, _, _ := strings.Cut(rest, "```")
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(block), &raw); err != nil {
		t.Fatalf("README yaml: %v", err)
	}
	procs, _ := raw["processors"].(map[string]any)
	out := map[string]*confmap.Conf{}
	for id, v := range procs {
		if id != typ && !strings.HasPrefix(id, typ+"/") {
			continue
		}
		m, _ := v.(map[string]any)
		out[id] = confmap.NewFromStringMap(m)
	}
	if len(out) == 0 {
		t.Fatalf("README example configures no %s processor", typ)
	}
	return out
}
