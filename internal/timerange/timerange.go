// Package timerange parses the times people type on the command line into a
// half-open UTC range [Since, Until): relative durations ("15m", "2h", "7d",
// "1w"), absolute times ("2025-12-15 14:00:00", "2025-12-15", RFC 3339) read
// in a chosen zone, "now", and ranges written "A to B". Storage keeps UTC, so
// every result is in UTC whatever zone the input was read in.
package timerange

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Range is a half-open time range [Since, Until), both in UTC.
type Range struct {
	Since, Until time.Time
}

// String renders the range for reports, in UTC.
func (r Range) String() string {
	return r.Since.Format("2006-01-02 15:04:05") + " to " + r.Until.Format("2006-01-02 15:04:05") + " UTC"
}

// Duration is the range's length.
func (r Range) Duration() time.Duration { return r.Until.Sub(r.Since) }

// absoluteLayouts are tried in order; all are read in the caller's zone
// unless they carry their own offset.
var absoluteLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04:05",
	"2006-01-02 15:04",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04:05",
	"2006-01-02T15:04",
	"2006-01-02",
}

// ParseDuration extends time.ParseDuration with days ("7d") and weeks ("2w"),
// which are what people use for profile ranges, and allows mixing them
// ("1d12h").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			break // not a d/w prefix: let time.ParseDuration judge the rest
		}
		unit := rest[i]
		if unit != 'd' && unit != 'w' {
			break
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		day := 24 * time.Hour
		if unit == 'w' {
			day *= 7
		}
		total += time.Duration(n * float64(day))
		rest = rest[i+1:]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("duration %q: want e.g. 15m, 2h, 7d", s)
		}
		total += d
	}
	if total <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return total, nil
}

// ParseTime reads s as "now", a duration before now ("15m" = 15 minutes
// ago, "-15m" too), or an absolute time in loc (nil = UTC). RFC 3339 input
// keeps its own offset.
func ParseTime(s string, now time.Time, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.UTC
	}
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, errors.New("empty time")
	case strings.EqualFold(s, "now"):
		return now.UTC(), nil
	}
	if d, err := ParseDuration(strings.TrimSuffix(strings.TrimPrefix(s, "-"), " ago")); err == nil {
		return now.Add(-d).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	for _, layout := range absoluteLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want a duration before now (15m, 2h, 7d), \"now\", \"2025-12-15 14:00:00\" or RFC 3339", s)
}

// New makes the range [since, until) from two inputs of ParseTime; an empty
// until means now.
func New(since, until string, now time.Time, loc *time.Location) (Range, error) {
	s, err := ParseTime(since, now, loc)
	if err != nil {
		return Range{}, fmt.Errorf("since: %w", err)
	}
	u := now.UTC()
	if strings.TrimSpace(until) != "" {
		if u, err = ParseTime(until, now, loc); err != nil {
			return Range{}, fmt.Errorf("until: %w", err)
		}
	}
	if !s.Before(u) {
		return Range{}, fmt.Errorf("empty range: since %s is not before until %s", s.Format(time.RFC3339), u.Format(time.RFC3339))
	}
	return Range{Since: s, Until: u}, nil
}

// Parse reads "A to B" (either side as in ParseTime) or a single time A
// meaning "A to now".
func Parse(s string, now time.Time, loc *time.Location) (Range, error) {
	a, b, ok := strings.Cut(s, " to ")
	if !ok {
		return New(s, "", now, loc)
	}
	return New(a, b, now, loc)
}

// LooksLikeRange reports whether s parses as a range, so a caller taking
// "<build-id|range>" can tell the two apart: build IDs are hex strings,
// which never parse as times or durations except when all digits and
// followed by a unit, which hex cannot be ('d' aside: "7d" is a duration,
// so hex build IDs are matched only at 8 characters or more).
func LooksLikeRange(s string, now time.Time, loc *time.Location) bool {
	if isHex(s) && len(s) >= 8 {
		return false
	}
	_, err := Parse(s, now, loc)
	return err == nil
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
