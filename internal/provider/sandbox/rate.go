package sandbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxRateCount bounds the count in a rate: above a million per unit the
// limiter's interval approaches clock resolution and the limit means nothing.
const MaxRateCount = 1_000_000

// Rate is a request budget: Count requests per Per.
type Rate struct {
	Count int
	Per   time.Duration
}

var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// ParseRate reads "<count>/<unit>" with unit s, m or h: "40/m", "40/s",
// "2400/h". Spaces around the parts are allowed; the count is 1 to
// MaxRateCount.
func ParseRate(s string) (Rate, error) {
	countStr, unit, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: want <count>/<unit> with unit s, m or h, like 40/m", s)
	}
	per, ok := rateUnits[strings.TrimSpace(unit)]
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: unit %q is not one of s, m, h", s, strings.TrimSpace(unit))
	}
	n, err := strconv.Atoi(strings.TrimSpace(countStr))
	if err != nil || n < 1 || n > MaxRateCount {
		return Rate{}, fmt.Errorf("rate %q: count must be a whole number from 1 to %d", s, MaxRateCount)
	}
	return Rate{Count: n, Per: per}, nil
}

// String formats r the way ParseRate reads it.
func (r Rate) String() string {
	for u, d := range rateUnits {
		if d == r.Per {
			return strconv.Itoa(r.Count) + "/" + u
		}
	}
	return fmt.Sprintf("%d/%s", r.Count, r.Per)
}

// Interval is the steady-state spacing between allowed requests.
func (r Rate) Interval() time.Duration { return r.Per / time.Duration(r.Count) }

// limiter is a GCRA (generic cell rate algorithm): the token bucket expressed
// as one timestamp, the theoretical arrival time of the next request. A
// request is allowed when it arrives no earlier than tat minus the burst
// tolerance; a refused request does not move tat, so callers that back off
// are not punished further.
type limiter struct {
	interval  time.Duration
	tolerance time.Duration
	tat       time.Time
}

func newLimiter(r Rate, burst int) *limiter {
	iv := r.Interval()
	return &limiter{interval: iv, tolerance: time.Duration(burst-1) * iv}
}

// allow reports whether a request at now fits, and if not how long until it
// would.
func (l *limiter) allow(now time.Time) (bool, time.Duration) {
	tat := l.tat
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) - l.tolerance; wait > 0 {
		return false, wait
	}
	l.tat = tat.Add(l.interval)
	return true, 0
}

// retryAfterSeconds rounds a wait up to whole seconds, at least one, as the
// Retry-After header carries it: rounding down would invite a retry that is
// refused again.
func retryAfterSeconds(wait time.Duration) int64 {
	s := int64((wait + time.Second - 1) / time.Second)
	return max(s, 1)
}
