package queue

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfter caps what a server may ask us to wait, so a malformed or
// hostile header cannot park a caller without a deadline for days.
const maxRetryAfter = time.Hour

// parseRetryAfter reads a Retry-After value, either delay-seconds or an HTTP
// date, relative to now. It reports false when the value is absent or
// unreadable; a date in the past means "retry now" (zero, true).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			// Too many digits to be anything but "a very long time".
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return maxRetryAfter, true
			}
			return 0, false
		}
		if secs >= uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > maxRetryAfter:
		return maxRetryAfter, true
	}
	return d, true
}
