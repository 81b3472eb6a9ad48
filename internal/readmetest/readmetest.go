// Package readmetest checks that a component README's YAML example is a
// configuration the component accepts, so the documentation cannot rot.
package readmetest

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.yaml.in/yaml/v3"
)

// Configs returns the settings of every component of a kind ("receivers",
// "processors", "exporters") whose ID is typ or typ/<name>, from the first
// ```yaml block of the file at path. It fails the test when there is none.
func Configs(t testing.TB, path, kind, typ string) map[string]*confmap.Conf {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatalf("%s has no yaml example", path)
	}
	block, _, _ := strings.Cut(rest, "```")
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("%s yaml: %v", path, err)
	}
	components, _ := doc[kind].(map[string]any)
	out := map[string]*confmap.Conf{}
	for id, v := range components {
		if id != typ && !strings.HasPrefix(id, typ+"/") {
			continue
		}
		m, _ := v.(map[string]any) // a bare "buildid:" is nil: the defaults
		out[id] = confmap.NewFromStringMap(m)
	}
	if len(out) == 0 {
		t.Fatalf("%s example configures no %s %s", path, kind, typ)
	}
	return out
}

// Check decodes every config of factory's type in the example the way the
// collector does (onto the defaults) and validates it; it returns them.
func Check(t *testing.T, path, kind string, factory component.Factory) map[string]component.Config {
	t.Helper()
	out := map[string]component.Config{}
	for id, conf := range Configs(t, path, kind, factory.Type().String()) {
		cfg := factory.CreateDefaultConfig()
		if err := conf.Unmarshal(cfg); err != nil {
			t.Errorf("%s %s: %v", path, id, err)
			continue
		}
		if v, ok := cfg.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				t.Errorf("%s %s: %v", path, id, err)
			}
		}
		out[id] = cfg
	}
	return out
}
