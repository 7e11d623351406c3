package pace

import (
	"strings"
	"testing"
	"time"
)

// rateSeeds are the parse table and the fuzz corpus at once, so every case a
// reviewer reads here is also where fuzzing starts.
var rateSeeds = []struct {
	in   string
	want Rate
	ok   bool
}{
	{"", Unlimited, true},
	{"0", Unlimited, true},
	{"unlimited", Unlimited, true},
	{" Unlimited ", Unlimited, true},
	{"40/s", Rate{40, time.Second}, true},
	{"40/m", Rate{40, time.Minute}, true},
	{"40/min", Rate{40, time.Minute}, true},
	{"40/MINUTE", Rate{40, time.Minute}, true},
	{"2400/h", Rate{2400, time.Hour}, true},
	{"3/hours", Rate{3, time.Hour}, true},
	{"10/1s", Rate{10, time.Second}, true},
	{"90/1m30s", Rate{90, 90 * time.Second}, true},
	{"10/1.5s", Rate{10, 1500 * time.Millisecond}, true},
	{" 40/s ", Rate{40, time.Second}, true},
	{"1000000/s", Rate{1000000, time.Second}, true},
	{"1000001/s", Rate{}, false}, // under a microsecond apart
	{"0/m", Rate{}, false},
	{"-1/s", Rate{}, false},
	{"40", Rate{}, false},
	{"40/", Rate{}, false},
	{"/s", Rate{}, false},
	{"40/d", Rate{}, false},
	{"40/0s", Rate{}, false},
	{"40/-1s", Rate{}, false},
	{"40 / s", Rate{}, false},
	{"x/s", Rate{}, false},
	{"40/s/s", Rate{}, false},
	{"99999999999999999999/s", Rate{}, false},
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range rateSeeds {
		got, err := ParseRate(c.in)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if !c.ok {
			if err == nil {
				t.Errorf("ParseRate(%q) = %+v; want an error", c.in, got)
				continue
			}
			// The message names the value and says what to write instead.
			if !strings.Contains(err.Error(), c.in) || !strings.Contains(err.Error(), "accepted forms") {
				t.Errorf("ParseRate(%q) error %q does not name the value and the accepted forms", c.in, err)
			}
		}
	}
}

func TestRateInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    Rate
		want time.Duration
	}{
		{Rate{40, time.Second}, 25 * time.Millisecond},
		{Rate{40, time.Minute}, 1500 * time.Millisecond},
		// 1s/3 does not divide: rounding up keeps the pace at or under 3/s.
		{Rate{3, time.Second}, 333333334 * time.Nanosecond},
		{Unlimited, 0},
	} {
		if got := c.r.Interval(); got != c.want {
			t.Errorf("%v.Interval() = %s, want %s", c.r, got, c.want)
		}
	}
	if got := ceilMicros(Rate{3, time.Second}.Interval()); got != 333334 {
		t.Errorf("3/s is %d µs apart in the database, want 333334 (rounded up)", got)
	}
}

func TestRateUnmarshalText(t *testing.T) {
	t.Parallel()
	var r Rate
	if err := r.UnmarshalText([]byte("40/m")); err != nil || r != (Rate{40, time.Minute}) {
		t.Fatalf("UnmarshalText(40/m) = %+v, %v", r, err)
	}
	if err := r.UnmarshalText([]byte("fast")); err == nil {
		t.Fatal("UnmarshalText(fast) succeeded")
	}
}

// FuzzParseRate checks that ParseRate never panics, that what it accepts is
// usable by a Limiter, and that String writes it back to the same Rate.
func FuzzParseRate(f *testing.F) {
	for _, c := range rateSeeds {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if r != (Rate{}) {
				t.Fatalf("ParseRate(%q) returned %+v with error %v", s, r, err)
			}
			return
		}
		if !r.IsUnlimited() && (r.Count < 1 || r.Per <= 0 || r.tooFine()) {
			t.Fatalf("ParseRate(%q) accepted an unusable rate %+v", s, r)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %+v, but its String %q reads back as %+v, %v", s, r, r.String(), back, err)
		}
	})
}
