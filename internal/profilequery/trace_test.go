package profilequery

import (
	"strings"
	"testing"
	"time"
)

func TestParseTraceID(t *testing.T) {
	const id = "0af7651916cd43dd8448eb211c80319c"
	for _, in := range []string{
		id,
		strings.ToUpper(id),
		"  " + id + "\n",
		"00-" + id + "-b7ad6b7169203331-01",
		"traceparent: 00-" + id + "-b7ad6b7169203331-01",
		"Traceparent:00-" + strings.ToUpper(id) + "-b7ad6b7169203331-00",
		"0af76519-16cd-43dd-8448-eb211c80319c", // as SQL shows the trace tables' UUIDs
	} {
		got, err := ParseTraceID(in)
		if err != nil || got != id {
			t.Errorf("ParseTraceID(%q) = %q, %v", in, got, err)
		}
	}
	for in, want := range map[string]string{
		"":                                       "got 0 characters",
		"abc":                                    "got 3 characters",
		id + "00":                                "got 34 characters",
		strings.Repeat("z", 32):                  "not hexadecimal",
		strings.Repeat("0", 32):                  "all-zero",
		"00-" + id + "-b7ad6b71692033-01":        "W3C traceparent is",
		"00-" + id[:30] + "-b7ad6b7169203331-01": "W3C traceparent is",
		"0af7651916cd-43dd-8448-eb21-1c80319c":   "a UUID is",
		"0af76519-16cd-43dd-8448-eb211c80319z":   "not hexadecimal",
	} {
		if _, err := ParseTraceID(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTraceID(%q): %v, want an error with %q", in, err, want)
		}
	}
}

func TestHotspotsSelfWithCaller(t *testing.T) {
	p := prof(
		st("b", 10, "main;serve;verify;rsa"),
		st("b", 4, "main;refund;rsa"), // rsa's other caller: fewer samples
		st("b", 5, "main;serve;encode"),
		st("b", 5, "gc"), // a root leaf has no caller
		st("b", 1, "main;aaa;encode"),
	)
	hs := p.Hotspots(0)
	if len(hs) != 3 {
		t.Fatalf("hotspots: %+v", hs)
	}
	want := []Hotspot{
		{Function: "rsa", Caller: "verify", Samples: 14, Share: 14.0 / 25},
		{Function: "encode", Caller: "serve", Samples: 6, Share: 6.0 / 25},
		{Function: "gc", Samples: 5, Share: 5.0 / 25},
	}
	for i := range want {
		if hs[i] != want[i] {
			t.Errorf("hotspot %d: %+v want %+v", i, hs[i], want[i])
		}
	}
	if top := p.Hotspots(1); len(top) != 1 || top[0].Function != "rsa" {
		t.Errorf("Hotspots(1): %+v", top)
	}
}

func TestFormatCPUTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		PeriodAt(19):            "52.6ms",
		PeriodAt(99):            "10.1ms",
		PeriodAt(999):           "1.00ms",
		4200 * time.Millisecond: "4.20s",
		252 * time.Second:       "4m12s",
		0:                       "0.00ms",
	} {
		if got := FormatCPUTime(d); got != want {
			t.Errorf("FormatCPUTime(%s) = %q want %q", d, got, want)
		}
	}
	if PeriodAt(0) != 0 {
		t.Error("PeriodAt(0) must be 0")
	}
}
