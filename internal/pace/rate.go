package pace

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is how many sends a provider account accepts per period. The zero Rate
// is unlimited: a Limiter built with it never touches the database.
type Rate struct {
	// Count is the number of sends allowed per Per; zero means unlimited.
	Count int
	// Per is the period Count applies to; zero when Count is zero.
	Per time.Duration
}

// Unlimited is the Rate of a provider that does not throttle.
var Unlimited = Rate{}

// MinInterval is the shortest interval between two sends a Rate may ask
// for. Postgres keeps timestamps in microseconds, so a shorter interval could
// not be represented in the shared pace.
const MinInterval = time.Microsecond

// acceptedForms is quoted by every parse error so the operator sees what to
// write instead.
const acceptedForms = `accepted forms: "40/s", "40/m", "2400/h" ` +
	`(units s, sec, second(s), m, min, minute(s), h, hr, hour(s)), ` +
	`"10/1.5s" (a Go duration after the slash), or "", "0", "unlimited" for no limit`

// unitPeriods maps the unit words ParseRate accepts after the slash.
var unitPeriods = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
}

// ParseRate is owed's one rate grammar: the workers' OWED_PROVIDER_RATE, the
// sandbox's limit, the dev stack's --rate and the benchmarks all read it. It
// accepts
// "<count>/<unit>" (40/s, 40/m, 40/min, 2400/h), "<count>/<duration>" with a
// Go duration (10/1s, 90/1m30s), and "", "0" or "unlimited" for a provider
// that does not throttle. Units are case-insensitive and surrounding spaces
// are ignored. A count of zero with a period ("0/m") is rejected rather than
// read as "never send", which no operator means.
func ParseRate(s string) (Rate, error) {
	v := strings.TrimSpace(s)
	switch strings.ToLower(v) {
	case "", "0", "unlimited":
		return Unlimited, nil
	}
	countText, perText, ok := strings.Cut(v, "/")
	if !ok {
		return Rate{}, fmt.Errorf("pace: rate %q has no slash; %s", s, acceptedForms)
	}
	count, err := strconv.Atoi(countText)
	if err != nil || count < 1 {
		return Rate{}, fmt.Errorf("pace: rate %q: count %q must be a whole number of at least 1; %s",
			s, countText, acceptedForms)
	}
	per, ok := unitPeriods[strings.ToLower(perText)]
	if !ok {
		per, err = time.ParseDuration(perText)
		if err != nil || per <= 0 {
			return Rate{}, fmt.Errorf("pace: rate %q: period %q is neither a unit nor a positive duration; %s",
				s, perText, acceptedForms)
		}
	}
	r := Rate{Count: count, Per: per}
	if r.tooFine() {
		return Rate{}, fmt.Errorf("pace: rate %q asks for sends less than %s apart, finer than the pace can keep; %s",
			s, MinInterval, acceptedForms)
	}
	return r, nil
}

// Decode makes *Rate an envconfig.Decoder, so a configuration struct holds
// a typed Rate read once with ParseRate, and a wrong OWED_PROVIDER_RATE fails
// at start-up with the variable's name in the message.
func (r *Rate) Decode(value string) error {
	parsed, err := ParseRate(value)
	if err != nil {
		return err
	}
	*r = parsed
	return nil
}

// IsUnlimited reports whether r places no limit on sends.
func (r Rate) IsUnlimited() bool { return r.Count == 0 }

// Interval is the time between two sends at this rate, Per/Count rounded up
// to the nanosecond, or zero when r is unlimited. It rounds up because a pace
// a hair slower than the provider's costs nothing, and one a hair faster
// eventually earns a 429.
func (r Rate) Interval() time.Duration {
	if r.IsUnlimited() {
		return 0
	}
	n := time.Duration(r.Count)
	interval := r.Per / n
	if r.Per%n != 0 {
		interval++
	}
	return interval
}

// tooFine reports whether r asks for sends closer than MinInterval. It
// divides without rounding up, so a rate just past the limit is refused
// rather than quietly slowed down to it.
func (r Rate) tooFine() bool {
	return !r.IsUnlimited() && r.Per/time.Duration(r.Count) < MinInterval
}

// String writes r in a form ParseRate reads back to the same Rate.
func (r Rate) String() string {
	switch {
	case r.IsUnlimited():
		return "unlimited"
	case r.Per == time.Second:
		return fmt.Sprintf("%d/s", r.Count)
	case r.Per == time.Minute:
		return fmt.Sprintf("%d/m", r.Count)
	case r.Per == time.Hour:
		return fmt.Sprintf("%d/h", r.Count)
	}
	return fmt.Sprintf("%d/%s", r.Count, r.Per)
}

// RateSetting is OWED_PROVIDER_RATE as read, by the workers and the
// sweeper: Set is false while the variable is unset or empty, and each
// account then keeps its provider's default pace; set, Rate is every
// account's pace (Unlimited for "unlimited" or "0").
type RateSetting struct {
	Rate Rate
	Set  bool
}

// Decode reads the variable with ParseRate, except that empty stays
// unset; envconfig names OWED_PROVIDER_RATE in the error.
func (p *RateSetting) Decode(value string) error {
	if strings.TrimSpace(value) == "" {
		*p = RateSetting{}
		return nil
	}
	r, err := ParseRate(value)
	if err != nil {
		return err
	}
	*p = RateSetting{Rate: r, Set: true}
	return nil
}

// String is the start-up log's word for the setting.
func (p RateSetting) String() string {
	if !p.Set {
		return "provider defaults"
	}
	return p.Rate.String()
}

// For returns each account's pace: the set rate for every account, or
// defaults(account) (the providers Router's DefaultRate) when unset.
func (p RateSetting) For(defaults func(account string) Rate) func(account string) Rate {
	if p.Set || defaults == nil {
		return func(string) Rate { return p.Rate }
	}
	return defaults
}
