package retryafter

import (
	"net/http"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// seeds are the parse table under DefaultMax and the fuzz corpus at once:
// every case a reviewer reads here is also where fuzzing starts.
var seeds = []struct {
	in   string
	want time.Duration
	ok   bool
}{
	{"0", 0, true},
	{"5", 5 * time.Second, true},
	{"120", 120 * time.Second, true},
	{" 3 ", 3 * time.Second, true},
	{"3600", time.Hour, true},
	{"3601", DefaultMax, true},
	{"18446744073709551616", DefaultMax, true},
	{"99999999999999999999999999", DefaultMax, true},
	{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true}, // IMF-fixdate
	{"Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true},     // RFC 850, still accepted by HTTP/1.1
	{"Sun Mar  1 12:00:10 2026", 10 * time.Second, true},      // asctime
	{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
	{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true}, // in the past
	{"Sun, 06 Nov 1994 08:49:37 GMT", 0, true}, // long past
	{"Mon, 01 Mar 2027 12:00:00 GMT", DefaultMax, true},
	{"Fri, 31 Dec 9999 23:59:59 GMT", DefaultMax, true}, // saturating Sub
	{"", 0, false},
	{"-1", 0, false},
	{"-3", 0, false},
	{"1.5", 0, false},
	{"1e9", 0, false},
	{"+5", 0, false},
	{"3a", 0, false},
	{"soon", 0, false},
	{"5 seconds", 0, false},
	{"2026-03-01T12:00:30Z", 0, false},
	{"\x00", 0, false},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range seeds {
		got, ok := Parse(tt.in, now, DefaultMax)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// A date is a whole second but now is not: the wait rounds up, never down.
func TestParseRoundsUp(t *testing.T) {
	t.Parallel()
	got, ok := Parse("Sun, 01 Mar 2026 12:00:30 GMT", now.Add(100*time.Millisecond), DefaultMax)
	if !ok || got != 30*time.Second {
		t.Fatalf("got %v, %v; want 30s rounded up from 29.9s", got, ok)
	}
}

// The caller's limit caps both forms; zero or less means DefaultMax.
func TestParseCapsAtTheCallersLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in    string
		limit time.Duration
		want  time.Duration
	}{
		{"900", 15 * time.Minute, 15 * time.Minute},
		{"901", 15 * time.Minute, 15 * time.Minute},
		{"899", 15 * time.Minute, 899 * time.Second},
		{"2", 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"1", 1500 * time.Millisecond, time.Second},
		{"Sun, 01 Mar 2026 12:30:00 GMT", 15 * time.Minute, 15 * time.Minute},
		{"Sun, 01 Mar 2026 12:00:02 GMT", 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"7200", 0, DefaultMax},
		{"7200", -time.Second, DefaultMax},
	} {
		if got, ok := Parse(tt.in, now, tt.limit); !ok || got != tt.want {
			t.Errorf("Parse(%q, limit %v) = %v, %v; want %v", tt.in, tt.limit, got, ok, tt.want)
		}
	}
}

// FuzzParse checks that no value panics or yields a wait outside 0..limit,
// and that a value that is not a Retry-After carries no wait. The seeds run
// as a regular test.
func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, limit := range []time.Duration{DefaultMax, 1500 * time.Millisecond} {
			d, ok := Parse(s, now, limit)
			if !ok && d != 0 {
				t.Fatalf("Parse(%q, %v) = %v with ok=false", s, limit, d)
			}
			if d < 0 || d > limit {
				t.Fatalf("Parse(%q, %v) = %v, outside [0, %v]", s, limit, d, limit)
			}
		}
	})
}
