package buildidprocessor

import (
	"testing"

	"github.com/hotpath-dev/hotpath/internal/readmetest"
)

// TestReadmeExample decodes every buildid config in README.md's YAML
// example the way the collector does, and validates it.
func TestReadmeExample(t *testing.T) {
	readmetest.Check(t, "README.md", "processors", NewFactory())
}
