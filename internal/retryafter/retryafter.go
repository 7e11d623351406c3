// Package retryafter owns the one reading of an HTTP Retry-After value
// (RFC 9110 §10.2.3) in owed: the provider adapters read it from a
// provider's 429 or 503, the queue client from the queue server's.
//
// The rules are the same for every caller. A value is delta-seconds or an
// HTTP date in any of the three forms HTTP/1.1 accepts (IMF-fixdate, the
// obsolete RFC 850 form, asctime). A date becomes a wait from now, rounded up
// to whole seconds as the header intends, so a caller that waits exactly that
// long never arrives a fraction early; a date in the past means "now" and
// yields zero. An empty, negative, fractional or otherwise malformed value is
// no Retry-After at all. Every wait is capped: a buggy or hostile server
// saying "wait a year" must not park a caller without a deadline.
//
// The package never sleeps and never reads the clock; the caller passes the
// instant a date is measured from.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultMax is the cap when the caller configures none: an hour, after
// which the next request asks the server again. Callers with their own limit
// (the worker's OWED_RETRY_AFTER_MAX) apply it on top.
const DefaultMax = time.Hour

// Parse reads value relative to now and caps the wait at limit (DefaultMax
// when limit is zero or less). It reports false, with a zero wait, when value
// is not a Retry-After.
func Parse(value string, now time.Time, limit time.Duration) (time.Duration, bool) {
	if limit <= 0 {
		limit = DefaultMax
	}
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(limit/time.Second) {
			// Only overflow fails ParseInt on a string of digits: a number
			// too large to hold is certainly above the cap.
			return limit, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	switch {
	case d <= 0:
		return 0, true
	case d >= limit:
		// Checked before rounding: Sub saturates at the largest Duration,
		// and rounding that up would overflow.
		return limit, true
	}
	// An HTTP date has whole seconds but now does not; round the wait up so
	// a caller waiting exactly d never arrives a fraction early.
	if rem := d % time.Second; rem != 0 {
		d += time.Second - rem
	}
	return min(d, limit), true
}

// isDigits reports whether s is all ASCII digits, which is what
// delta-seconds is: no sign, no fraction, no exponent.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
