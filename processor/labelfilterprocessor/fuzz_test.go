package labelfilterprocessor

import (
	"flag"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seeds from internal/hostileotlp")

// The committed seeds under testdata/fuzz/FuzzFilter are the hostile cases.
func TestFuzzSeeds(t *testing.T) {
	if err := hostileotlp.SyncCorpus("testdata/fuzz/FuzzFilter", *updateSeeds); err != nil {
		t.Fatal(err)
	}
}

// FuzzFilter feeds arbitrary OTLP bytes to the filter: whatever decodes is
// filtered without panicking, and afterwards no resource, scope, profile or
// sample points at a key off the list (or outside the dictionary).
// `go test` runs the committed seeds; `go test -fuzz FuzzFilter` explores.
func FuzzFilter(f *testing.F) {
	lf, err := newProcessor(createDefaultConfig(), processortest.NewNopSettings(Type))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(data)
		if err != nil {
			return
		}
		lf.filter(pd)
		dict := pd.Dictionary()
		check := func(what, key string) {
			if !lf.allow.allows(key) {
				t.Fatalf("%s key %q survived", what, key)
			}
		}
		checkIdx := func(what string, ai int32) {
			if ai < 0 || int(ai) >= dict.AttributeTable().Len() {
				t.Fatalf("%s attribute index %d survived", what, ai)
			}
			check(what, profileschema.Str(dict, dict.AttributeTable().At(int(ai)).KeyStrindex()))
		}
		for _, rp := range pd.ResourceProfiles().All() {
			for k := range rp.Resource().Attributes().All() {
				check("resource", k)
			}
			for _, sp := range rp.ScopeProfiles().All() {
				for k := range sp.Scope().Attributes().All() {
					check("scope", k)
				}
				for _, p := range sp.Profiles().All() {
					for _, ai := range p.AttributeIndices().All() {
						checkIdx("profile", ai)
					}
					for _, s := range p.Samples().All() {
						for _, ai := range s.AttributeIndices().All() {
							checkIdx("sample", ai)
						}
					}
				}
			}
		}
	})
}
