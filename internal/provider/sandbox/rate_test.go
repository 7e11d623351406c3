package sandbox

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want Rate
		err  string
	}{
		{"40/m", Rate{40, time.Minute}, ""},
		{"40/s", Rate{40, time.Second}, ""},
		{"2400/h", Rate{2400, time.Hour}, ""},
		{" 5 / m ", Rate{5, time.Minute}, ""},
		{"40", Rate{}, "want <count>/<unit>"},
		{"40/d", Rate{}, `unit "d"`},
		{"0/m", Rate{}, "count must be"},
		{"-1/m", Rate{}, "count must be"},
		{"1.5/m", Rate{}, "count must be"},
		{"1000001/s", Rate{}, "count must be"},
		{"/m", Rate{}, "count must be"},
		{"", Rate{}, "want <count>/<unit>"},
	} {
		got, err := ParseRate(tt.in)
		if tt.err == "" && (err != nil || got != tt.want) {
			t.Errorf("ParseRate(%q) = %v, %v", tt.in, got, err)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseRate(%q) error %v, want %q", tt.in, err, tt.err)
		}
	}
	if s := (Rate{40, time.Minute}).String(); s != "40/m" {
		t.Errorf("String() = %q", s)
	}
}

// FuzzParseRate: ParseRate must never panic, and whatever it accepts has a
// positive interval and formats back to an equal rate.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"40/m", "40/s", "2400/h", "0/m", "1/", "/", "99999999999999999999/s", "1000000/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r.Interval() <= 0 {
			t.Fatalf("ParseRate(%q) = %v with interval %v", s, r, r.Interval())
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
	})
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	l := newLimiter(Rate{40, time.Minute}, 3) // one per 1.5s, three at once
	for i := range 3 {
		if ok, _ := l.allow(start); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	ok, wait := l.allow(start)
	if ok || wait != 1500*time.Millisecond {
		t.Fatalf("4th request: %v wait %v; want refused for 1.5s", ok, wait)
	}
	if retryAfterSeconds(wait) != 2 {
		t.Fatalf("Retry-After %d, want 2 (rounded up)", retryAfterSeconds(wait))
	}
	// A refusal does not move the schedule: after the wait one more fits.
	if ok, _ := l.allow(start.Add(wait)); !ok {
		t.Fatal("request after the wait refused")
	}
	// Paced exactly at the rate, a caller is never refused.
	at := start.Add(time.Hour)
	for i := range 200 {
		if ok, _ := l.allow(at); !ok {
			t.Fatalf("paced request %d refused", i)
		}
		at = at.Add(1500 * time.Millisecond)
	}
	if retryAfterSeconds(time.Millisecond) != 1 || retryAfterSeconds(0) != 1 {
		t.Fatal("Retry-After must be at least 1")
	}
}
