package sandbox

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Fault kinds, the keys of Stats.Faults.
const (
	FaultError     = "error"
	FaultTimeout   = "timeout"
	FaultStorm     = "storm"
	FaultPermanent = "permanent"
)

// Timeout modes: how a hung request ends.
const (
	Timeout504   = "504"
	TimeoutClose = "close"
)

// Fault defaults and bounds.
const (
	// DefaultTimeoutSeconds outlasts the adapters' 10 s client timeout, so
	// an injected timeout is seen by the worker as its own timeout.
	DefaultTimeoutSeconds = 12
	// MaxTimeoutHang bounds an injected hang; the server's write timeout is
	// set above it.
	MaxTimeoutHang = 60 * time.Second
	// DefaultStormRetryAfterSeconds is the Retry-After of a 429 storm: long
	// enough that a worker honouring it visibly pauses.
	DefaultStormRetryAfterSeconds = 60
)

// Faults are failures the sandbox injects. ErrorRate and TimeoutRate are
// fractions of the sends that pass the rate limit, drawn from one uniform
// number, so together they are at most 1.
type Faults struct {
	// ErrorRate is the fraction of sends answered 503.
	ErrorRate float64 `json:"error_rate"`
	// TimeoutRate is the fraction of sends that hang for TimeoutSeconds and
	// then end as TimeoutMode.
	TimeoutRate    float64 `json:"timeout_rate"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// TimeoutMode is "504" (answer 504 Gateway Timeout) or "close" (drop
	// the connection without an answer).
	TimeoutMode string `json:"timeout_mode"`
	// StormSeconds answers every send 429 with StormRetryAfterSeconds for
	// this long from the moment the faults are set.
	StormSeconds           float64 `json:"storm_seconds"`
	StormRetryAfterSeconds int     `json:"storm_retry_after_seconds"`
	// PermanentRecipient is a regular expression; a send whose recipient
	// matches it is answered 422, which the webhook adapter classifies
	// permanent. "bounce" matches any recipient containing "bounce".
	PermanentRecipient string `json:"permanent_recipient"`
}

func (f *Faults) applyDefaults() {
	if f.TimeoutSeconds == 0 {
		f.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if f.TimeoutMode == "" {
		f.TimeoutMode = Timeout504
	}
	if f.StormRetryAfterSeconds == 0 {
		f.StormRetryAfterSeconds = DefaultStormRetryAfterSeconds
	}
}

// Validate reports the first invalid field by its JSON name.
func (f Faults) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"timeout_rate", f.TimeoutRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("%s: must be a fraction from 0 to 1 (got %v)", r.name, r.v)
		}
	}
	if f.ErrorRate+f.TimeoutRate > 1 {
		return fmt.Errorf("error_rate + timeout_rate: must be at most 1 (got %v + %v)", f.ErrorRate, f.TimeoutRate)
	}
	if !(f.TimeoutSeconds >= 0 && f.TimeoutSeconds <= MaxTimeoutHang.Seconds()) {
		return fmt.Errorf("timeout_seconds: must be from 0 to %v (got %v)", MaxTimeoutHang.Seconds(), f.TimeoutSeconds)
	}
	if f.TimeoutMode != Timeout504 && f.TimeoutMode != TimeoutClose {
		return fmt.Errorf("timeout_mode: must be %q or %q (got %q)", Timeout504, TimeoutClose, f.TimeoutMode)
	}
	// A storm longer than a day is a forgotten setting, not a drill.
	if !(f.StormSeconds >= 0 && f.StormSeconds <= (24*time.Hour).Seconds()) {
		return fmt.Errorf("storm_seconds: must be from 0 to 86400 (got %v)", f.StormSeconds)
	}
	if f.StormRetryAfterSeconds < 1 || f.StormRetryAfterSeconds > int(time.Hour/time.Second) {
		return fmt.Errorf("storm_retry_after_seconds: must be from 1 to 3600 (got %d)", f.StormRetryAfterSeconds)
	}
	if _, err := regexp.Compile(f.PermanentRecipient); err != nil {
		return fmt.Errorf("permanent_recipient: not a regular expression: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return nil
}
