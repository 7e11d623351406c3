package sandbox

import (
	"time"

	"github.com/owedhq/owed/internal/pace"
)

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

func newLimiter(r pace.Rate, burst int) *limiter {
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
