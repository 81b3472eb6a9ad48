package timerange

import (
	"strings"
	"testing"
	"time"
)

var now = time.Date(2025, 12, 15, 15, 30, 0, 0, time.UTC)

func TestParseTime(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		loc  *time.Location
		want time.Time
	}{
		{"15m", nil, now.Add(-15 * time.Minute)},
		{"2h", nil, now.Add(-2 * time.Hour)},
		{"7d", nil, now.Add(-7 * 24 * time.Hour)},
		{"1d12h", nil, now.Add(-36 * time.Hour)},
		{"1w", nil, now.Add(-7 * 24 * time.Hour)},
		{"-90s", nil, now.Add(-90 * time.Second)},
		{"now", nil, now},
		{"2025-12-15 14:00:00", nil, time.Date(2025, 12, 15, 14, 0, 0, 0, time.UTC)},
		{"2025-12-15 14:00", nil, time.Date(2025, 12, 15, 14, 0, 0, 0, time.UTC)},
		{"2025-12-15", nil, time.Date(2025, 12, 15, 0, 0, 0, 0, time.UTC)},
		// Read in Berlin (UTC+1 in December), stored as UTC.
		{"2025-12-15 14:00:00", berlin, time.Date(2025, 12, 15, 13, 0, 0, 0, time.UTC)},
		// RFC 3339 keeps its own offset whatever --tz says.
		{"2025-12-15T14:00:00+02:00", berlin, time.Date(2025, 12, 15, 12, 0, 0, 0, time.UTC)},
		{"2025-12-15T14:00:00Z", nil, time.Date(2025, 12, 15, 14, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		got, err := ParseTime(c.in, now, c.loc)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("%q: got %s want %s", c.in, got, c.want)
		}
	}
}

func TestParseTimeRejects(t *testing.T) {
	for _, in := range []string{"", "yesterday", "15x", "0m", "2025-13-01", "abc123"} {
		if _, err := ParseTime(in, now, nil); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestRanges(t *testing.T) {
	r, err := Parse("2025-12-14 14:00:00 to 2025-12-14 15:00:00", now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Duration() != time.Hour || r.Since.Hour() != 14 {
		t.Fatalf("range %v", r)
	}
	r, err = Parse("1h", now, nil)
	if err != nil || !r.Until.Equal(now) || r.Duration() != time.Hour {
		t.Fatalf("1h: %v %v", r, err)
	}
	if _, err := Parse("1h to 2h", now, nil); err == nil || !strings.Contains(err.Error(), "empty range") {
		t.Fatalf("reversed range: %v", err)
	}
	if _, err := New("1h", "later", now, nil); err == nil || !strings.Contains(err.Error(), "until") {
		t.Fatalf("bad until: %v", err)
	}
}

func TestLooksLikeRange(t *testing.T) {
	for in, want := range map[string]bool{
		"1h": true, "7d": true, "2025-12-14 14:00:00 to 2025-12-14 15:00:00": true,
		"abc12345": false, "1f0e9d8c7b6a59483726150f1e2d3c4b5a697887": false, "12345678": false,
	} {
		if got := LooksLikeRange(in, now, nil); got != want {
			t.Errorf("%q: got %v", in, got)
		}
	}
}
