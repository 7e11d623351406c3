package pace

import (
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// rateAccepted and rateRejected are the parse table and the fuzz corpus at
// once, so every case a reviewer reads here is also where fuzzing starts.
var rateAccepted = []struct {
	in   string
	want Rate
}{
	{"", Unlimited},
	{"0", Unlimited},
	{"unlimited", Unlimited},
	{" Unlimited ", Unlimited},
	{"40/s", Rate{40, time.Second}},
	{"40/m", Rate{40, time.Minute}},
	{"40/min", Rate{40, time.Minute}},
	{"40/MINUTE", Rate{40, time.Minute}},
	{"2400/h", Rate{2400, time.Hour}},
	{"3/hours", Rate{3, time.Hour}},
	{"10/1s", Rate{10, time.Second}},
	{"90/1m30s", Rate{90, 90 * time.Second}},
	{"10/1.5s", Rate{10, 1500 * time.Millisecond}},
	{" 40/s ", Rate{40, time.Second}},
	{"1000000/s", Rate{1000000, time.Second}},
}

var rateRejected = []string{
	"1000001/s", // under a microsecond apart
	"0/m", "-1/s", "1.5/m", "x/s", "99999999999999999999/s",
	"40", "40/", "/s", "/", "1/", "40/s/s", "40 / s",
	"40/d", "40/0s", "40/-1s",
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range rateAccepted {
		if got, err := ParseRate(c.in); err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range rateRejected {
		got, err := ParseRate(in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %+v; want an error", in, got)
			continue
		}
		// The message names the value and says what to write instead.
		if !strings.Contains(err.Error(), in) || !strings.Contains(err.Error(), "accepted forms") {
			t.Errorf("ParseRate(%q) error %q does not name the value and the accepted forms", in, err)
		}
	}
	for _, r := range []Rate{{40, time.Minute}, {40, time.Second}, {2400, time.Hour}, {10, 1500 * time.Millisecond}, Unlimited} {
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Errorf("%+v.String() = %q reads back as %+v, %v", r, r.String(), back, err)
		}
	}
	if s := (Rate{40, time.Minute}).String(); s != "40/m" {
		t.Errorf("String() = %q, want 40/m", s)
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

// A configuration struct holds a typed Rate: envconfig decodes it with
// ParseRate and names the variable when the value is wrong.
func TestRateDecodesFromTheEnvironment(t *testing.T) {
	var cfg struct {
		Rate Rate `envconfig:"PROVIDER_RATE"`
	}
	t.Setenv("OWED_PROVIDER_RATE", "40/m")
	if err := envconfig.Process("OWED", &cfg); err != nil || cfg.Rate != (Rate{40, time.Minute}) {
		t.Fatalf("OWED_PROVIDER_RATE=40/m decoded as %+v, %v", cfg.Rate, err)
	}
	t.Setenv("OWED_PROVIDER_RATE", "fast")
	err := envconfig.Process("OWED", &cfg)
	if err == nil || !strings.Contains(err.Error(), "OWED_PROVIDER_RATE") || !strings.Contains(err.Error(), "accepted forms") {
		t.Fatalf("OWED_PROVIDER_RATE=fast: %v, want an error naming the variable and the accepted forms", err)
	}
}

// FuzzParseRate checks that ParseRate never panics, that what it accepts is
// usable by a Limiter, and that String writes it back to the same Rate.
func FuzzParseRate(f *testing.F) {
	for _, c := range rateAccepted {
		f.Add(c.in)
	}
	for _, in := range rateRejected {
		f.Add(in)
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
