package labelfilterprocessor

import (
	"strings"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/readmetest"
)

// TestReadmeExample decodes every labelfilter config in README.md's YAML
// example the way the collector does, and validates it; the bare one is the
// default list and the strict one replaces it.
func TestReadmeExample(t *testing.T) {
	cfgs := readmetest.Check(t, "README.md", "processors", NewFactory())
	if len(cfgs) != 2 {
		t.Fatalf("README configures %d labelfilter processors, want 2", len(cfgs))
	}
	for id, c := range cfgs {
		allow := c.(*Config).Allow
		switch id {
		case "labelfilter":
			if strings.Join(allow, ",") != strings.Join(DefaultAllow, ",") {
				t.Errorf("%s: allow %v, want the default list", id, allow)
			}
		case "labelfilter/strict":
			if strings.Join(allow, ",") != "service.name,host.name,hotpath.build_id" {
				t.Errorf("%s: allow %v", id, allow)
			}
		}
	}
}
