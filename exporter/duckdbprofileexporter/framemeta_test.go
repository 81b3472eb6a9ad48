package duckdbprofileexporter

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/pdict"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// TestFrameMetaDropsWhatNoRealFrameHas keeps a frame's type, file and line
// as sent, and drops a type or file longer than any real one (a hostile
// sender's megabyte "type" would be stored with every frame it names).
func TestFrameMetaDropsWhatNoRealFrameHas(t *testing.T) {
	pd := pprofile.NewProfiles()
	b := pdict.New(pd.Dictionary())
	loc := func(typ, file string) pprofile.Location {
		i := b.Location(0, 0x10, b.Function("handle", file), 7, b.Attribute(profileschema.AttrFrameType, typ))
		return pd.Dictionary().LocationTable().At(int(i))
	}
	if m := frameMeta(pd.Dictionary(), loc("python", "/srv/app.py")); m.Type != "python" || m.File != "/srv/app.py" || m.Line != 7 {
		t.Errorf("a real frame: %+v", m)
	}
	if m := frameMeta(pd.Dictionary(), loc(strings.Repeat("x", maxFrameTypeLen+1), "/srv/app.py")); m.Type != "" || m.File != "/srv/app.py" {
		t.Errorf("an over-long type: %+v, want it dropped and the file kept", m)
	}
	if m := frameMeta(pd.Dictionary(), loc("python", "/"+strings.Repeat("d/", maxFrameFileLen/2))); m.File != "" || m.Type != "python" {
		t.Errorf("an over-long file: type %q, file of %d bytes; want the file dropped", m.Type, len(m.File))
	}
}
