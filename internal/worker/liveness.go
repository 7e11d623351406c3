package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// StallAfterDefault is how long the worker may make no progress while it
// has work before /healthz fails (OWED_WORKER_STALL_AFTER). It is well
// beyond a message's slowest legitimate path at the default settings (a
// claim, the due second, the pace's max wait, a 15 s send and 30 s of
// retrying its record).
const StallAfterDefault = 2 * time.Minute

// stallMargin is how much longer than OWED_SEND_TIMEOUT
// OWED_WORKER_STALL_AFTER must be: what a message may spend besides its
// send (the claim, the due second, the pace, recording the answer).
const stallMargin = time.Minute

// liveness knows whether the worker's loop is making progress, for
// /healthz: a wedged worker (its senders stuck on a lock, its database
// pool exhausted, a receive or a pace read that never returns) answers 503
// and is restarted, while an idle worker with an empty queue stays healthy.
// It is stalled when
//   - messages were received and none finished (sent, settled, returned)
//     for StallAfter, or
//   - a fetcher's step (reading the pace, a receive) has run StallAfter
//     beyond its own bound (a receive's long poll and margin).
//
// Ages are measured on the process's monotonic clock: this is a watchdog
// of this process's goroutines, never compared with the ledger's instants.
type liveness struct {
	stallAfter time.Duration

	mu sync.Mutex
	// inHand counts the messages received and not finished.
	inHand int
	// doneAt is when a message last finished, or when inHand rose from
	// zero: the start of the wait for the next finish.
	doneAt time.Time
	// steps are the fetchers' steps under way.
	steps map[*step]struct{}
}

// step is one fetcher step under way: what it does, since when, and how
// long it may run by its own bound.
type step struct {
	what  string
	since time.Time
	bound time.Duration
}

func newLiveness(stallAfter time.Duration) *liveness {
	return &liveness{stallAfter: stallAfter, steps: map[*step]struct{}{}}
}

// begin records a fetcher step under way; the returned func ends it.
func (l *liveness) begin(what string, bound time.Duration) func() {
	s := &step{what: what, since: time.Now(), bound: bound}
	l.mu.Lock()
	l.steps[s] = struct{}{}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.steps, s)
		l.mu.Unlock()
	}
}

// received counts n messages received.
func (l *liveness) received(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	if l.inHand == 0 {
		l.doneAt = time.Now()
	}
	l.inHand += n
	l.mu.Unlock()
}

// finished counts n received messages finished.
func (l *liveness) finished(n int) {
	l.mu.Lock()
	l.inHand -= n
	l.doneAt = time.Now()
	l.mu.Unlock()
}

// stalled says why the worker makes no progress, or "" when it does.
func (l *liveness) stalled() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for s := range l.steps {
		if ran := now.Sub(s.since); ran > s.bound+l.stallAfter {
			return fmt.Sprintf("a fetcher has been %s for %s (OWED_WORKER_STALL_AFTER=%s)", s.what, ran.Round(time.Second), l.stallAfter)
		}
	}
	if idle := now.Sub(l.doneAt); l.inHand > 0 && idle > l.stallAfter {
		return fmt.Sprintf("%d messages received but none finished for %s (OWED_WORKER_STALL_AFTER=%s)", l.inHand, idle.Round(time.Second), l.stallAfter)
	}
	return ""
}

// Stalled says why the worker makes no progress while it has work, or ""
// when it does (or is idle): what /healthz answers.
func (w *Worker) Stalled() string { return w.live.stalled() }

// Healthz is the worker's liveness: 200 while its loop makes progress (an
// idle worker included), 503 with a one-line reason when it is stalled
// (see liveness), so the orchestrator restarts a wedged worker.
func (w *Worker) Healthz(rw http.ResponseWriter, _ *http.Request) {
	rw.Header().Set("Content-Type", "application/json")
	reason := w.Stalled()
	if reason == "" {
		rw.Write([]byte(`{"status":"ok"}` + "\n"))
		return
	}
	body, _ := json.Marshal(map[string]string{"status": "stalled", "reason": reason})
	rw.WriteHeader(http.StatusServiceUnavailable)
	rw.Write(append(body, '\n'))
}

// HealthzOnly is the handler of the worker's main listener: GET /healthz
// alone, answered by Healthz.
func (w *Worker) HealthzOnly() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", w.Healthz)
	return mux
}
