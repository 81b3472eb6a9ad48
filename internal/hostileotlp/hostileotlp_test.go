package hostileotlp

import (
	"bytes"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Every case survives the wire (a sender can really send it), its encoding
// is deterministic (the committed seeds can be checked), and it carries the
// good process.
func TestCasesEncodeDeterministically(t *testing.T) {
	for _, c := range Cases() {
		a, b := Marshal(c.Build(CorpusTime)), Marshal(c.Build(CorpusTime))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: encoding differs between builds", c.Name)
		}
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(a)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if pd.ResourceProfiles().Len() < 1 {
			t.Errorf("%s: no resources after decoding", c.Name)
		}
	}
}
