package emulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/queue/wire"
)

// Scopes a throttle fault applies to.
const (
	ScopePublish = "publish" // publish and publish_batch only
	ScopeAll     = "all"     // every /queue endpoint
)

// Faults are the emulator's test knobs. Set them at start (flags or
// OWED_QUEUE_FAULT_* variables) or at run time with POST /admin/faults.
// The zero value injects nothing.
type Faults struct {
	// ThrottleRate is the fraction (0..1) of requests in ThrottleScope
	// answered with ThrottleStatus and a Retry-After instead of being served.
	ThrottleRate float64 `json:"throttle_rate" envconfig:"QUEUE_FAULT_THROTTLE_RATE"`
	// ThrottleStatus is 429 or 503.
	ThrottleStatus int `json:"throttle_status" envconfig:"QUEUE_FAULT_THROTTLE_STATUS" default:"429"`
	// ThrottleScope is "publish" or "all".
	ThrottleScope string `json:"throttle_scope" envconfig:"QUEUE_FAULT_THROTTLE_SCOPE" default:"publish"`
	// RetryAfterSeconds is the Retry-After sent with a throttle.
	RetryAfterSeconds int `json:"retry_after_seconds" envconfig:"QUEUE_FAULT_RETRY_AFTER_SECONDS" default:"1"`
	// RetryAfterHTTPDate sends Retry-After as an HTTP date instead of seconds.
	RetryAfterHTTPDate bool `json:"retry_after_http_date" envconfig:"QUEUE_FAULT_RETRY_AFTER_HTTP_DATE"`
	// LatencyMS is added before every /queue request is served.
	LatencyMS int `json:"latency_ms" envconfig:"QUEUE_FAULT_LATENCY_MS"`
	// RedeliveryRate is the fraction (0..1) of consumed messages made
	// visible again at once, so they are delivered twice.
	RedeliveryRate float64 `json:"redelivery_rate" envconfig:"QUEUE_FAULT_REDELIVERY_RATE"`
}

// maxFaultLatency bounds the added latency below the server's write timeout.
const maxFaultLatency = 30 * time.Second

// Validate names the first unusable knob.
func (f Faults) Validate() error {
	switch {
	case f.ThrottleRate < 0 || f.ThrottleRate > 1:
		return fmt.Errorf("throttle_rate (OWED_QUEUE_FAULT_THROTTLE_RATE) %v: want 0..1", f.ThrottleRate)
	case f.ThrottleRate > 0 && f.ThrottleStatus != http.StatusTooManyRequests && f.ThrottleStatus != http.StatusServiceUnavailable:
		return fmt.Errorf("throttle_status (OWED_QUEUE_FAULT_THROTTLE_STATUS) %d: want 429 or 503", f.ThrottleStatus)
	case f.ThrottleRate > 0 && f.ThrottleScope != ScopePublish && f.ThrottleScope != ScopeAll:
		return fmt.Errorf("throttle_scope (OWED_QUEUE_FAULT_THROTTLE_SCOPE) %q: want %q or %q", f.ThrottleScope, ScopePublish, ScopeAll)
	case f.RetryAfterSeconds < 0 || f.RetryAfterSeconds > 3600:
		return fmt.Errorf("retry_after_seconds (OWED_QUEUE_FAULT_RETRY_AFTER_SECONDS) %d: want 0..3600", f.RetryAfterSeconds)
	case f.LatencyMS < 0 || time.Duration(f.LatencyMS)*time.Millisecond > maxFaultLatency:
		return fmt.Errorf("latency_ms (OWED_QUEUE_FAULT_LATENCY_MS) %d: want 0..%d", f.LatencyMS, maxFaultLatency.Milliseconds())
	case f.RedeliveryRate < 0 || f.RedeliveryRate > 1:
		return fmt.Errorf("redelivery_rate (OWED_QUEUE_FAULT_REDELIVERY_RATE) %v: want 0..1", f.RedeliveryRate)
	}
	return nil
}

// throttle answers the request with the configured throttle when the dice
// say so, and reports whether it did.
func (f *Faults) throttle(w http.ResponseWriter, publish bool) bool {
	if f.ThrottleRate <= 0 || (f.ThrottleScope != ScopeAll && !publish) || rand.Float64() >= f.ThrottleRate {
		return false
	}
	retryAfter := strconv.Itoa(f.RetryAfterSeconds)
	if f.RetryAfterHTTPDate {
		// HTTP dates have whole seconds: round up so the client never
		// returns early. The date is the wall clock's, as the client reads
		// it: it stands for a real-time wait, like a timer.
		at := time.Now().Add(time.Duration(f.RetryAfterSeconds)*time.Second + time.Second).UTC()
		retryAfter = at.Format(http.TimeFormat)
	}
	w.Header().Set("Retry-After", retryAfter)
	code := wire.CodeThrottled
	if f.ThrottleStatus == http.StatusServiceUnavailable {
		code = wire.CodeUnavailable
	}
	writeError(w, &apiError{status: f.ThrottleStatus, code: code, msg: "injected fault: try again after the Retry-After"})
	return true
}

// delay sleeps the configured latency, or less when the request goes away.
func (f *Faults) delay(ctx context.Context) {
	if f.LatencyMS <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(f.LatencyMS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// redelivered picks the ids the redelivery fault hands out again.
func (f *Faults) redelivered(ids []int64) []int64 {
	if f.RedeliveryRate <= 0 {
		return nil
	}
	var out []int64
	for _, id := range ids {
		if rand.Float64() < f.RedeliveryRate {
			out = append(out, id)
		}
	}
	return out
}

// adminFaults reads (GET) or replaces (POST) the injected failures.
func (e *Emulator) adminFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		// Knobs the body leaves out take their defaults, so {} clears
		// every fault and a throttle needs only its rate.
		f := DefaultConfig().Faults
		if aerr := e.decode(r, smallBodyLimit, &f); aerr != nil {
			writeError(w, aerr)
			return
		}
		if err := e.SetFaults(f); err != nil {
			writeError(w, &apiError{status: http.StatusBadRequest, code: wire.CodeInvalidRequest, msg: err.Error()})
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: wire.CodeMethodNotAllow, msg: "/admin/faults takes GET or POST"})
		return
	}
	writeJSON(w, http.StatusOK, wire.Data[Faults]{Data: e.Faults()})
}
