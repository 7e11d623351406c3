package worker

import (
	"fmt"
	"strings"
	"time"
)

// Retry schedules. The default spans hours, so a provider's or a receiver's
// outage of a few minutes (a deploy) delays rows instead of failing them; a
// row's expiry bounds it (a retry that would land after expires_at settles
// the row expired). The webhook channel's default is Standard Webhooks'
// guidance as its authors ship it (immediately, then 5 s, 5 min, 30 min,
// 2 h, 5 h, 10 h, 10 h; https://docs.svix.com/retries, the reference of
// https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md):
// only 410 Gone stops it (the webhook adapter classifies only 410 as
// permanent).
const (
	RetryScheduleDefault        = "30s,2m,10m,30m,1h,2h,4h"
	RetryScheduleWebhookDefault = "5s,5m,30m,2h,5h,10h,10h"
	// MaxScheduleLen bounds a schedule's retries.
	MaxScheduleLen = 100
	// MaxScheduleDelay bounds one retry's delay.
	MaxScheduleDelay = 48 * time.Hour
)

// Schedule is a retry schedule: the delay before each retry, in order
// (Schedule[0] after the first failed attempt). Its text form is a comma
// separated list of Go durations ("30s,2m,10m"), which OWED_RETRY_SCHEDULE
// and OWED_RETRY_SCHEDULE_<CHANNEL> take.
type Schedule []time.Duration

// ParseSchedule reads a schedule's text form.
func ParseSchedule(s string) (Schedule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxScheduleLen {
		return nil, fmt.Errorf("%d retries: at most %d", len(parts), MaxScheduleLen)
	}
	out := make(Schedule, 0, len(parts))
	for _, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration like 30s, 2m or 1h", strings.TrimSpace(p))
		}
		if d <= 0 || d > MaxScheduleDelay {
			return nil, fmt.Errorf("retry delay %s must be above zero and at most %s", d, MaxScheduleDelay)
		}
		out = append(out, d)
	}
	return out, nil
}

// MustSchedule is ParseSchedule for the constants above.
func MustSchedule(s string) Schedule {
	out, err := ParseSchedule(s)
	if err != nil {
		panic(err)
	}
	return out
}

// UnmarshalText lets envconfig read a schedule; its error names the value,
// and envconfig's names the variable.
func (s *Schedule) UnmarshalText(b []byte) error {
	out, err := ParseSchedule(string(b))
	if err != nil {
		return fmt.Errorf("retry schedule: %w (want durations separated by commas, like %s)", err, RetryScheduleDefault)
	}
	*s = out
	return nil
}

func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// Retries is the worker's retry policy: a schedule per channel, Default
// for the others. An empty Default keeps the library's exponential backoff
// from Options.RetryBase.
type Retries struct {
	Default   Schedule
	ByChannel map[string]Schedule
}

// schedule returns channel's schedule, nil for the exponential backoff.
func (r Retries) schedule(channel string) Schedule {
	if s, ok := r.ByChannel[channel]; ok && len(s) > 0 {
		return s
	}
	return r.Default
}

// maxAttempts is how many sends a row of channel gets: Options.MaxAttempts
// when it was set, otherwise the schedule's length plus the first send.
func (c *completer) maxAttempts(channel string) int {
	if c.attemptLimit > 0 {
		return c.attemptLimit
	}
	if s := c.retries.schedule(channel); len(s) > 0 {
		return len(s) + 1
	}
	return MaxAttemptsDefault
}

// retryDelay is the delay before retry n (1-based: after n failed
// attempts) of a row of channel: the schedule's entry (its last one past
// its end, when OWED_MAX_ATTEMPTS allows more), or the exponential backoff
// without a schedule; both with jitter, so rows that failed together do
// not come back in lockstep.
func (c *completer) retryDelay(channel string, n int) time.Duration {
	s := c.retries.schedule(channel)
	if len(s) == 0 {
		return backoffDelay(c.retryBase, n)
	}
	return jitter(s[min(n, len(s))-1])
}
