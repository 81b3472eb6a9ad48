package labelfilterprocessor

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// input is one resource with the given attributes and one samples/count
// profile with one sample carrying sampleAttrs (key → value).
func input(resAttrs map[string]string, sampleAttrs [][2]string) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	st := dict.StringTable()
	st.Append("")
	dict.AttributeTable().AppendEmpty()
	strIdx := func(s string) int32 {
		st.Append(s)
		return int32(st.Len() - 1)
	}
	// A location attribute shared through the dictionary must survive.
	frameType := dict.AttributeTable().AppendEmpty()
	frameType.SetKeyStrindex(strIdx(profileschema.AttrFrameType))
	frameType.Value().SetStr(profileschema.FrameTypeKernel)

	rp := pd.ResourceProfiles().AppendEmpty()
	for k, v := range resAttrs {
		rp.Resource().Attributes().PutStr(k, v)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().Attributes().PutStr("scope.secret", "x")
	p := sp.Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(strIdx(profileschema.SampleTypeSamples))
	p.SampleType().SetUnitStrindex(strIdx(profileschema.UnitCount))
	s := p.Samples().AppendEmpty()
	s.Values().Append(3)
	for _, kv := range sampleAttrs {
		a := dict.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(strIdx(kv[0]))
		a.Value().SetStr(kv[1])
		s.AttributeIndices().Append(int32(dict.AttributeTable().Len() - 1))
	}
	return pd
}

type harness struct {
	p    xprocessor.Profiles
	sink *consumertest.ProfilesSink
	tel  *componenttest.Telemetry
}

func newHarness(t *testing.T, cfg *Config) *harness {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.ProfilesSink)
	p, err := NewFactory().CreateProfiles(context.Background(),
		processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Capabilities().MutatesData {
		t.Fatal("labelfilter mutates its input and must say so")
	}
	return &harness{p: p, sink: sink, tel: tel}
}

func (h *harness) run(t *testing.T, pd pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	h.sink.Reset()
	if err := h.p.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	if len(h.sink.AllProfiles()) != 1 {
		t.Fatalf("got %d batches downstream, want 1", len(h.sink.AllProfiles()))
	}
	return h.sink.AllProfiles()[0]
}

// dropped is the drop counter by scope.
func (h *harness) dropped(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := h.tel.GetMetric("otelcol_processor_labelfilter_dropped_attributes")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("scope")
		out[v.AsString()] += dp.Value
	}
	return out
}

func keys(pd pprofile.Profiles) (res []string, sample []string) {
	rp := pd.ResourceProfiles().At(0)
	for k := range rp.Resource().Attributes().All() {
		res = append(res, k)
	}
	dict := pd.Dictionary()
	s := rp.ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	for _, ai := range s.AttributeIndices().All() {
		sample = append(sample, profileschema.Str(dict, dict.AttributeTable().At(int(ai)).KeyStrindex()))
	}
	return res, sample
}

// The default list keeps the storage keys (prefixes included) and drops
// everything else from resources, scopes and samples, counting each drop;
// dictionary entries used by locations stay.
func TestDefaultAllowListKeepsStorageKeysOnly(t *testing.T) {
	h := newHarness(t, NewFactory().CreateDefaultConfig().(*Config))
	pd := input(map[string]string{
		profileschema.AttrServiceName:      "checkout",
		profileschema.AttrHostName:         "node-1",
		profileschema.AttrK8sPodName:       "checkout-7d9",
		profileschema.AttrProcessExePath:   "/usr/bin/checkout",
		profileschema.AttrBuildIDGNU:       "abcd",
		profileschema.AttrBuildID:          "abcd",
		profileschema.AttrBinaryFirstSeen:  "1",
		profileschema.AttrK8sPodUID:        "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9",
		profileschema.AttrContainerRuntime: "containerd",
		profileschema.AttrHostID:           "d41d8cd98f00b204e9800998ecf8427e",
		profileschema.AttrOSType:           "linux",
		"deployment.environment":           "the deprecated key",
		"process.pid":                      "42",
		"user.email":                       "a@example.com",
		"process.executable":               "no dot after the prefix",
		"hotpath.build_idx":                "not the build-id key",
	}, [][2]string{{"thread.name", "worker"}, {profileschema.AttrContainerID, "c1"}})
	out := h.run(t, pd)
	res, sample := keys(out)
	want := map[string]bool{
		profileschema.AttrServiceName: true, profileschema.AttrHostName: true, profileschema.AttrK8sPodName: true,
		profileschema.AttrProcessExePath: true, profileschema.AttrBuildIDGNU: true, profileschema.AttrBuildID: true,
		profileschema.AttrBinaryFirstSeen: true, profileschema.AttrK8sPodUID: true, profileschema.AttrContainerRuntime: true,
		profileschema.AttrHostID: true, profileschema.AttrOSType: true,
	}
	if len(res) != len(want) {
		t.Errorf("resource keys %v, want %d keys", res, len(want))
	}
	for _, k := range res {
		if !want[k] {
			t.Errorf("resource key %q reached storage", k)
		}
	}
	if len(sample) != 1 || sample[0] != profileschema.AttrContainerID {
		t.Errorf("sample keys %v, want [%s]", sample, profileschema.AttrContainerID)
	}
	if n := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Scope().Attributes().Len(); n != 0 {
		t.Errorf("scope kept %d attributes", n)
	}
	if a := out.Dictionary().AttributeTable().At(1); profileschema.Str(out.Dictionary(), a.KeyStrindex()) != profileschema.AttrFrameType {
		t.Error("the frame-type dictionary entry locations use was removed")
	}
	got := h.dropped(t)
	if got[levelResource] != 5 || got[levelSample] != 1 || got[levelScope] != 1 {
		t.Errorf("dropped %v, want resource 5, sample 1, scope 1", got)
	}
	if v := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).Values().At(0); v != 3 {
		t.Errorf("sample value = %d, want 3 (samples are kept, only labels dropped)", v)
	}
}

// A dropped key is logged once as a warning, except process.pid, which the
// shipped pipelines send to buildid and drop here on purpose, and
// service.instance.id, which the receiver sends for pipelines that keep it:
// debug level. All are counted; service.namespace is kept.
func TestDropsLoggedOnceAndPIDQuietly(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}
	set.Logger = zap.New(core)
	sink := new(consumertest.ProfilesSink)
	p, err := NewFactory().CreateProfiles(context.Background(), set, NewFactory().CreateDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		pd := input(map[string]string{profileschema.AttrServiceName: "api", profileschema.AttrProcessPID: "42", "user.email": "a@example.com",
			profileschema.AttrServiceInstanceID: "627cc493-f310-47de-96bd-71410b7dec09", profileschema.AttrServiceNamespace: "shop"}, nil)
		if err := p.ConsumeProfiles(context.Background(), pd); err != nil {
			t.Fatal(err)
		}
	}
	levels := map[string][]zapcore.Level{}
	for _, e := range logs.All() {
		if k, ok := e.ContextMap()["key"].(string); ok {
			levels[k] = append(levels[k], e.Level)
		}
	}
	if got := levels["user.email"]; len(got) != 1 || got[0] != zap.WarnLevel {
		t.Errorf("user.email logged at %v, want one warning", got)
	}
	for _, key := range []string{profileschema.AttrProcessPID, profileschema.AttrServiceInstanceID} {
		if got := levels[key]; len(got) != 1 || got[0] != zap.DebugLevel {
			t.Errorf("%s logged at %v, want one debug line", key, got)
		}
	}
	if got := levels[profileschema.AttrServiceNamespace]; len(got) != 0 {
		t.Errorf("service.namespace logged at %v, want it kept", got)
	}
	h := &harness{tel: tel}
	if got := h.dropped(t)[levelResource]; got != 9 {
		t.Errorf("dropped %d resource attributes, want 9 (3 per request)", got)
	}
}

// Attribute indices outside the dictionary (hostile or buggy senders) are
// dropped and counted as invalid, never followed.
func TestInvalidAttributeIndicesDropped(t *testing.T) {
	h := newHarness(t, NewFactory().CreateDefaultConfig().(*Config))
	pd := input(map[string]string{profileschema.AttrServiceName: "svc"}, [][2]string{{profileschema.AttrContainerID, "c1"}})
	p := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	p.Samples().At(0).AttributeIndices().Append(-1, 9999)
	p.AttributeIndices().Append(12345)
	out := h.run(t, pd)
	if _, sample := keys(out); len(sample) != 1 {
		t.Errorf("sample keys %v, want only %s", sample, profileschema.AttrContainerID)
	}
	if n := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).AttributeIndices().Len(); n != 0 {
		t.Errorf("profile kept %d invalid attribute indices", n)
	}
	if got := h.dropped(t)["invalid"]; got != 3 {
		t.Errorf("invalid drops = %d, want 3", got)
	}
}

// A configured list replaces the default: keys only the default allows are
// dropped, and prefix patterns match only below the prefix.
func TestConfiguredAllowListReplacesDefault(t *testing.T) {
	h := newHarness(t, &Config{Allow: []string{profileschema.AttrServiceName, "team.*"}})
	out := h.run(t, input(map[string]string{
		profileschema.AttrServiceName: "svc", profileschema.AttrHostName: "n1",
		"team.name": "perf", "team": "bare prefix",
	}, nil))
	res, _ := keys(out)
	got := strings.Join(sorted(res), ",")
	if got != "service.name,team.name" {
		t.Errorf("resource keys %s, want service.name,team.name", got)
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		allow []string
		want  string // "" = valid
	}{
		{DefaultAllow, ""},
		{[]string{"a.b", "c.*"}, ""},
		{nil, "allow must list at least one attribute key"},
		{[]string{"*"}, "would let every key through"},
		{[]string{"a*.b"}, "not a trailing"},
		{[]string{""}, "empty key"},
	} {
		err := (&Config{Allow: tc.allow}).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.allow, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want it to say %q", tc.allow, err, tc.want)
		}
	}
}

// BenchmarkFilter measures one request of 100 resources with 10 attributes
// each (4 dropped), a scope attribute (dropped) and 100 samples each with 2
// attributes (1 dropped).
func BenchmarkFilter(b *testing.B) {
	f, err := newProcessor(createDefaultConfig(), processortest.NewNopSettings(Type))
	if err != nil {
		b.Fatal(err)
	}
	tmpl := input(nil, [][2]string{{"thread.name", "w"}, {profileschema.AttrContainerID, "c"}})
	base := tmpl.ResourceProfiles().At(0)
	for _, k := range []string{"service.name", "service.version", "host.name", "container.id", "process.executable.name", "hotpath.build_id", "a", "b", "c", "d"} {
		base.Resource().Attributes().PutStr(k, "v")
	}
	p := base.ScopeProfiles().At(0).Profiles().At(0)
	for j := 0; j < 99; j++ {
		p.Samples().At(0).CopyTo(p.Samples().AppendEmpty())
	}
	for i := 0; i < 99; i++ {
		base.CopyTo(tmpl.ResourceProfiles().AppendEmpty())
	}
	pd := pprofile.NewProfiles()
	for b.Loop() {
		b.StopTimer()
		tmpl.CopyTo(pd)
		b.StartTimer()
		if d := f.filter(pd); d.Total() != 100*(4+1+100) {
			b.Fatalf("dropped %+v", d)
		}
	}
}

// The batch id is not a label but how a resend is recognised downstream:
// it passes whatever the allow-list says, at the resource level only.
func TestBatchIDPassesAnyAllowList(t *testing.T) {
	h := newHarness(t, &Config{Allow: []string{profileschema.AttrServiceName}})
	out := h.run(t, input(map[string]string{
		profileschema.AttrServiceName: "svc", profileschema.AttrBatchID: "a1b2-7", "secret": "x",
	}, [][2]string{{profileschema.AttrBatchID, "not-here"}}))
	res, sample := keys(out)
	if got := strings.Join(sorted(res), ","); got != "hotpath.batch.id,service.name" {
		t.Errorf("resource keys %s, want hotpath.batch.id,service.name", got)
	}
	if len(sample) != 0 {
		t.Errorf("sample keys %v: the batch id is only kept on resources", sample)
	}
	if id := profileschema.BatchID(out); id != "a1b2-7" {
		t.Errorf("batch id %q after the filter", id)
	}
}
