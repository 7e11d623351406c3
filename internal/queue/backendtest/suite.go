// Package backendtest is the one suite every queue backend owed runs on
// must pass (rest against its emulator, sqs against a local SQS-compatible
// server, jetstream against an in-process nats-server): the contract of
// queue.Queue, checked against a real server.
//
// The suite must never assert what one real queue cannot give (an upper
// bound on a delay, an order of delivery, a dedup window), and never relies
// on deduplication by Key, because owed may not. It imports testing, so no
// production code may import it; backends check they implement queue.Queue
// in their own code.
package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
)

const (
	// eventually is how long a poll waits for a backend to reach a state
	// before the case fails. It is a failure deadline, never a timing
	// assertion: real and emulated queues are slow under load.
	eventually = 60 * time.Second
	// pollWait is the long-poll wait of the suite's receives.
	pollWait = time.Second
	// hold is the visibility of receives whose message the case keeps.
	hold = 60 * time.Second
	// timerSlack is how early a server's timer may fire. A backend rounds a
	// delay or a visibility up to its granularity, but a server measures it
	// with its own timers, which may run a few milliseconds short of the
	// instant the suite took before the call.
	timerSlack = 100 * time.Millisecond
)

// Option adjusts Run.
type Option func(*options)

type options struct {
	skips map[string]string
}

// Skip skips the named case with reason, which must name the limitation of
// the server or backend that makes the case unpassable there. A skip is
// reported in the test output; a case is never made to pass by weakening it.
func Skip(name, reason string) Option {
	return func(o *options) { o.skips[name] = reason }
}

type contractCase struct {
	name string
	run  func(t *testing.T, b queue.Queue)
}

// Cases lists the contract's case names, the names Skip takes.
func Cases() []string {
	names := make([]string, 0, len(cases))
	for _, c := range cases {
		names = append(names, c.name)
	}
	return names
}

// Run runs the contract against backends made by open. Each case calls open
// once and must get a backend on fresh, empty queues (its own queue, stream
// or dead-letter destination); the suite closes it. Cases run in parallel.
func Run(t *testing.T, open func(t *testing.T) queue.Queue, opts ...Option) {
	t.Helper()
	o := options{skips: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	for name := range o.skips {
		if !slices.Contains(Cases(), name) {
			t.Fatalf("backendtest.Skip(%q): no such case; the cases are %v", name, Cases())
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := o.skips[c.name]; ok {
				t.Skip(reason)
			}
			t.Parallel()
			b := open(t)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if err := b.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			})
			c.run(t, b)
		})
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// publish publishes msgs and fails the case on any error.
func publish(t *testing.T, b queue.Queue, msgs ...queue.Message) []string {
	t.Helper()
	res, err := b.Publish(testContext(t), msgs)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(res), len(msgs))
	}
	ids := make([]string, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("Publish message %d: %v", i, r.Err)
		}
		if r.ID == "" {
			t.Fatalf("Publish message %d: empty id", i)
		}
		ids[i] = r.ID
	}
	return ids
}

// receive polls until it holds n messages (hidden for visibility) and
// returns them; it fails the case when they do not come before the deadline
// or when more come than published.
func receive(t *testing.T, b queue.Queue, n int, visibility time.Duration) []queue.Delivery {
	t.Helper()
	ctx := testContext(t)
	var got []queue.Delivery
	deadline := time.Now().Add(eventually)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages within %v", len(got), n, eventually)
		}
		ds, err := b.Receive(ctx, min(n-len(got), 10), pollWait, visibility)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, ds...)
	}
	if len(got) > n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	for _, d := range got {
		if d.ID == "" || d.Receipt == "" {
			t.Fatalf("delivery without id or receipt: %+v", d)
		}
	}
	return got
}

// receiveOne receives the one message a case expects.
func receiveOne(t *testing.T, b queue.Queue, visibility time.Duration) queue.Delivery {
	t.Helper()
	return receive(t, b, 1, visibility)[0]
}

// expectNothing receives for d and fails the case if any message comes.
func expectNothing(t *testing.T, b queue.Queue, d time.Duration) {
	t.Helper()
	ctx := testContext(t)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		ds, err := b.Receive(ctx, 10, min(time.Until(end), pollWait), hold)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if len(ds) > 0 {
			t.Fatalf("received %d message(s) that must stay hidden: first %q (receive count %d)",
				len(ds), ds[0].Body, ds[0].ReceiveCount)
		}
	}
}

// waitFor polls check until it reports done, failing the case with check's
// last description when the deadline passes.
func waitFor(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for {
		ok, last := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v; last: %s", what, eventually, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitForStats polls Stats until want holds for it.
func waitForStats(t *testing.T, b queue.Queue, what string, want func(queue.Stats) bool) queue.Stats {
	t.Helper()
	var s queue.Stats
	waitFor(t, what, func() (bool, string) {
		var err error
		s, err = b.Stats(testContext(t))
		if err != nil {
			return false, err.Error()
		}
		return want(s), fmt.Sprintf("%+v", s)
	})
	return s
}

// depths is a Stats predicate on the four counters.
func depths(visible, inFlight, delayed, dead int64) func(queue.Stats) bool {
	return func(s queue.Stats) bool {
		return s.Visible == visible && s.InFlight == inFlight && s.Delayed == delayed && s.DeadLetterDepth == dead
	}
}

// listDeadLetters lists the first page of up to limit dead letters.
func listDeadLetters(t *testing.T, b queue.Queue, limit int) []queue.DeadLetter {
	t.Helper()
	dls, _, err := b.DeadLetters(testContext(t), limit, "")
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	return dls
}

// waitForDeadLetters polls the dead letters until exactly n are listed.
func waitForDeadLetters(t *testing.T, b queue.Queue, n int) []queue.DeadLetter {
	t.Helper()
	var dls []queue.DeadLetter
	waitFor(t, fmt.Sprintf("%d dead letter(s) listed", n), func() (bool, string) {
		dls = listDeadLetters(t, b, 100)
		return len(dls) == n, fmt.Sprintf("%d listed", len(dls))
	})
	return dls
}

func ack(t *testing.T, b queue.Queue, receipts ...string) {
	t.Helper()
	if err := b.Ack(testContext(t), receipts...); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

func changeVisibility(t *testing.T, b queue.Queue, receipt string, d time.Duration) {
	t.Helper()
	if err := b.ChangeVisibility(testContext(t), receipt, d); err != nil {
		t.Fatalf("ChangeVisibility(%v): %v", d, err)
	}
}

// notBefore fails the case when a message surfaced earlier than allowed
// after from.
func notBefore(t *testing.T, what string, from time.Time, allowed time.Duration) {
	t.Helper()
	if got := time.Since(from); got < allowed-timerSlack {
		t.Fatalf("%s after %v, want not before %v", what, got, allowed)
	}
}

func sameMessage(t *testing.T, got, want queue.Delivery) {
	t.Helper()
	if got.ID != want.ID || !bytes.Equal(got.Body, want.Body) || got.Key != want.Key {
		t.Fatalf("redelivered %q (id %s key %q), want %q (id %s key %q)",
			got.Body, got.ID, got.Key, want.Body, want.ID, want.Key)
	}
	if got.ReceiveCount <= want.ReceiveCount {
		t.Fatalf("receive count %d after %d, want it to grow", got.ReceiveCount, want.ReceiveCount)
	}
	if got.Receipt == want.Receipt {
		t.Fatalf("a redelivery reused the receipt %q", got.Receipt)
	}
}

// text is s as a message body: a JSON string, since every body owed
// publishes is a JSON document (and the REST queue carries nothing else).
func text(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// isText reports whether body is text(s).
func isText(body []byte, s string) bool { return bytes.Equal(body, text(s)) }
