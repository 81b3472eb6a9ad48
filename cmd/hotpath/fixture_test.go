package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/pdict"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// batch is what one process reported at one time: stacks ROOT FIRST as
// "a;b;c" with counts. A frame "raw:0x1a2b" is an unsymbolized address at
// file offset 0x1a2b of the process's executable; "python:fn@file:line"
// (or any frame type for python) is a frame of that type with its
// function's file and the line.
type batch struct {
	at      time.Time
	service string
	build   string
	exe     string
	pod     string
	// podUID and container say where the process ran (k8s.pod.uid,
	// container.id); "" for none.
	podUID, container string
	stacks            map[string]int64
	// hz is the sampling frequency recorded with the samples (the
	// profile's cpu/nanoseconds period); 0 records none.
	hz int
}

// otlp lays batches out as the receiver and buildid processor do: one
// resource per process with service, pod, build ID and executable path,
// a samples/count profile, leaf-first stacks in a shared dictionary.
func otlp(batches []batch) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	b := pdict.New(pd.Dictionary())
	for _, bt := range batches {
		rp := pd.ResourceProfiles().AppendEmpty()
		attrs := rp.Resource().Attributes()
		attrs.PutStr(profileschema.AttrServiceName, bt.service)
		if bt.build != "" {
			attrs.PutStr(profileschema.AttrBuildID, bt.build)
		}
		if bt.exe != "" {
			attrs.PutStr(profileschema.AttrProcessExePath, bt.exe)
		}
		if bt.pod != "" {
			attrs.PutStr(profileschema.AttrK8sPodName, bt.pod)
		}
		if bt.podUID != "" {
			attrs.PutStr(profileschema.AttrK8sPodUID, bt.podUID)
		}
		if bt.container != "" {
			attrs.PutStr(profileschema.AttrContainerID, bt.container)
		}
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(profileschema.ScopeName)
		p := sp.Profiles().AppendEmpty()
		p.SampleType().SetTypeStrindex(b.String(profileschema.SampleTypeSamples))
		p.SampleType().SetUnitStrindex(b.String(profileschema.UnitCount))
		p.SetTime(pcommon.NewTimestampFromTime(bt.at))
		if bt.hz > 0 {
			p.PeriodType().SetTypeStrindex(b.String(profileschema.SampleTypeCPU))
			p.PeriodType().SetUnitStrindex(b.String(profileschema.UnitNanoseconds))
			p.SetPeriod(int64(time.Second) / int64(bt.hz))
		}
		exe := bt.exe
		if exe == "" {
			exe = "/usr/bin/" + bt.service
		}
		const start, fileOff = 0x400000, 0
		mapping := b.Mapping(pdict.MappingKey{Start: start, Limit: start + 1<<30, Offset: fileOff, File: exe})
		for folded, count := range bt.stacks {
			frames := strings.Split(folded, ";")
			locs := make([]int32, 0, len(frames))
			for i := len(frames) - 1; i >= 0; i-- {
				f := frames[i]
				if off, ok := strings.CutPrefix(f, "raw:0x"); ok {
					v, err := strconv.ParseUint(off, 16, 64)
					if err != nil {
						panic(err)
					}
					locs = append(locs, b.Location(mapping, start+v-fileOff, 0, 0, 0))
					continue
				}
				locs = append(locs, typedLocation(b, mapping, f))
			}
			s := p.Samples().AppendEmpty()
			s.SetStackIndex(b.Stack(locs))
			s.Values().Append(count)
		}
	}
	return pd
}

// writeDB stores batches through the real exporter (factory, queue,
// converter, writer) into a new file of the tier and returns its path.
// With endpoint set the exporter keeps running and serves queries there;
// the returned stop shuts it down.
func writeDB(t testing.TB, tier, path, endpoint string, batches []batch) (stop func()) {
	t.Helper()
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Tier = tier
	cfg.Path = path
	cfg.Query.Enabled = endpoint != ""
	cfg.Query.HTTP.NetAddr.Endpoint = endpoint
	ctx := context.Background()
	exp, err := f.CreateProfiles(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := exp.ConsumeProfiles(ctx, otlp(batches)); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		if err := exp.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if endpoint == "" {
		stop()
		return func() {}
	}
	t.Cleanup(func() { _ = exp.Shutdown(ctx) })
	// The exporter's queue writes asynchronously: wait until the rows are
	// visible through the endpoint.
	table := "cpu_profile_samples_local"
	if tier == "summary" {
		table = "cpu_profile_summaries"
	}
	c := sqlquery.Client{Endpoint: endpoint}
	for i := 0; ; i++ {
		res, err := c.Query(ctx, "SELECT count(*) FROM "+table)
		if err == nil && len(res.Rows) == 1 && fmt.Sprint(res.Rows[0][0]) != "0" {
			break
		}
		if i == 1000 {
			t.Fatalf("rows never became visible at %s: %v", endpoint, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop
}

// Two builds of "api" (old and new) and another service: the old build ran
// in two windows with the same behaviour, the new one has a regression in
// json.Unmarshal (30% -> ~46% of CPU).
const (
	oldBuild = "1f0e9d8c7b6a59483726150f1e2d3c4b5a697887"
	newBuild = "2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"
)

func deployFixture(now time.Time) []batch {
	old := func(at time.Time, jitter int64) batch {
		return batch{at: at, service: "api", build: oldBuild, exe: "/srv/api", pod: "api-1", stacks: map[string]int64{
			"main.main;main.serve;json.Unmarshal":                    600 + jitter,
			"main.main;main.serve;db.Query":                          800 - jitter,
			"main.main;main.serve;gzip.Write":                        590,
			"main.main;main.serve;db.Query;syscall.Syscall;read_[k]": 10,
			"main.main;raw:0x1a2b":                                   7,
		}}
	}
	var bs []batch
	for i := 0; i < 4; i++ { // minutes 50..47 and 30..27 before now
		bs = append(bs, old(now.Add(-50*time.Minute+time.Duration(i)*time.Minute), int64(i*5)))
		bs = append(bs, old(now.Add(-30*time.Minute+time.Duration(i)*time.Minute), -int64(i*5)))
		bs = append(bs, batch{at: now.Add(-10*time.Minute + time.Duration(i)*time.Minute), service: "api", build: newBuild, exe: "/srv/api", pod: "api-2", stacks: map[string]int64{
			"main.main;main.serve;json.Unmarshal": 1200,
			"main.main;main.serve;db.Query":       790,
			"main.main;main.serve;gzip.Write":     600,
		}})
		bs = append(bs, batch{at: now.Add(-10*time.Minute + time.Duration(i)*time.Minute), service: "worker", stacks: map[string]int64{"main;loop": 50}})
	}
	return bs
}

// typedLocation is the location of frame f: "type:fn@file:line" carries
// profile.frame.type, the function's file name and the line, as the
// receiver's CPython walker reports them; a plain name carries nothing.
func typedLocation(b *pdict.Builder, mapping int32, f string) int32 {
	kind, rest, typed := strings.Cut(f, ":")
	if !typed {
		return b.Location(mapping, 0, b.Function(f, ""), 0, 0)
	}
	name, src, _ := strings.Cut(rest, "@")
	file, lineStr, _ := strings.Cut(src, ":")
	line, _ := strconv.ParseInt(lineStr, 10, 64)
	return b.Location(mapping, 0, b.Function(name, file), line, b.Attribute(profileschema.AttrFrameType, kind))
}
