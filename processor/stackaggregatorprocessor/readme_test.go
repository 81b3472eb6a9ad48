package stackaggregatorprocessor

import (
	"testing"

	"github.com/hotpath-dev/hotpath/internal/readmetest"
)

// TestReadmeExample decodes every stackaggregator config in README.md's YAML
// example the way the collector does, and validates it.
func TestReadmeExample(t *testing.T) {
	readmetest.Check(t, "README.md", "processors", NewFactory())
}
