package queuetest

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/rest"
)

// The contract on delivery: visibility timeouts, extend, nack, the long poll
// and stats.

func testVisibilityRedelivery(t *testing.T, s *suite) {
	const visibility = time.Second
	id := s.publish(t, "v", "v").MessageID
	// Taken before the consume is sent: the lease starts later, on the
	// server, so the message cannot be back before visibility from here.
	leased := time.Now()
	m := s.consumeOne(t, visibility)
	// The next delivery, however soon it is asked for, is the redelivery
	// after the visibility timeout: a message that was not hidden would be
	// handed out again at once.
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != id || again.ReceiveCount != 2 {
		t.Fatalf("redelivery: got id=%s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(leased); d < visibility-timerSlack {
		t.Fatalf("redelivered after %s, before the %s visibility timeout ran out", d, visibility)
	}
}

func testExtend(t *testing.T, s *suite) {
	s.publish(t, "x", "x")
	m := s.consumeOne(t, time.Second)
	until, err := s.c.Extend(s.ctx, m.MessageID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if until.Before(time.Now().Add(30 * time.Second)) {
		t.Fatalf("extend: visible_at %s, want about a minute from now", until)
	}
	// Without the extension the message would be back after one second.
	s.expectEmpty(t, 2*time.Second)
	if st := s.stats(t); st.InFlight != 1 {
		t.Fatalf("stats: %+v, want in_flight=1", st)
	}
}

func testNackDelay(t *testing.T, s *suite) {
	const delay = time.Second
	s.publish(t, "n", "n")
	m := s.consumeOne(t, time.Minute)
	// Taken before the nack is sent, so the delay runs out no earlier than
	// delay from here.
	nacked := time.Now()
	if s.nack(t, m.MessageID, rest.NackOptions{Delay: delay, CountAsFailure: true, Reason: "provider 500"}) {
		t.Fatal("first counted nack dead-lettered")
	}
	// Delayed while the delay runs; visible again once it has run out,
	// which on a slow machine may be before the stats are read.
	st := s.stats(t)
	running := time.Since(nacked) < delay
	if st.InFlight != 0 || st.Delayed+st.Visible != 1 || (running && st.Delayed != 1) {
		t.Fatalf("stats after nack (delay still running: %v): %+v, want delayed=1 until the delay has run out, then visible=1", running, st)
	}
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != m.MessageID || again.ReceiveCount != 2 {
		t.Fatalf("after nack: got %s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(nacked); d < delay-timerSlack {
		t.Fatalf("returned after %s, before its %s delay", d, delay)
	}
}

func testUncountedNack(t *testing.T, s *suite) {
	s.publish(t, "u", "u")
	const throttled = MaxReceives + 3
	for i := 0; i < throttled; i++ {
		m := s.consumeOne(t, time.Minute)
		if s.nack(t, m.MessageID, rest.NackOptions{CountAsFailure: false, Reason: "provider 429"}) {
			t.Fatalf("uncounted nack %d dead-lettered the message", i+1)
		}
	}
	if st := s.stats(t); st.DeadLetterDepth != 0 || st.Visible != 1 {
		t.Fatalf("stats after %d uncounted nacks: %+v, want visible=1 dead=0", throttled, st)
	}
	// Counted failures still dead-letter it, after max_receives of them.
	for i := 1; ; i++ {
		m := s.consumeOne(t, time.Minute)
		if s.nack(t, m.MessageID, rest.NackOptions{CountAsFailure: true, Reason: "provider 500"}) {
			if i != MaxReceives {
				t.Fatalf("dead-lettered after %d counted failures, want %d", i, MaxReceives)
			}
			return
		}
		if i > 10 {
			t.Fatal("never dead-lettered")
		}
	}
}

func testLongPoll(t *testing.T, s *suite) {
	const empty = time.Second
	start := time.Now()
	s.expectEmpty(t, empty)
	if d := time.Since(start); d < empty-timerSlack {
		t.Fatalf("an empty %s long poll returned after %s", empty, d)
	}
	type result struct {
		msgs []rest.Delivery
		err  error
		took time.Duration
	}
	const wait = 20 * time.Second
	done := make(chan result, 1)
	go func() {
		t0 := time.Now()
		msgs, err := s.c.Consume(s.ctx, rest.ConsumeOptions{MaxMessages: 1, Wait: wait, VisibilityTimeout: time.Minute})
		done <- result{msgs, err, time.Since(t0)}
	}()
	// Give the consume a moment to start waiting, so the publish usually
	// lands during the wait. If it lands before, the consume still gets the
	// message: nothing below depends on when the publish arrived.
	time.Sleep(300 * time.Millisecond)
	s.publish(t, "lp", "lp")
	r := <-done
	if r.err != nil || len(r.msgs) != 1 {
		t.Fatalf("long poll: %d messages, %v", len(r.msgs), r.err)
	}
	// Answered when the message came, not when the wait ran out.
	if r.took >= wait {
		t.Fatalf("long poll answered after %s, its whole %s wait, though a message was published", r.took, wait)
	}
}

func testStats(t *testing.T, s *suite) {
	s.publish(t, "now", "now")
	if _, err := s.c.PublishOne(s.ctx, rest.Entry{Payload: payload("later"), IdempotencyKey: "later", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.publish(t, "third", "third")
	s.consumeOne(t, time.Minute)
	st := s.stats(t)
	if st.Visible != 1 || st.InFlight != 1 || st.Delayed != 1 || st.DeadLetterDepth != 0 {
		t.Fatalf("stats: %+v, want visible=1 in_flight=1 delayed=1", st)
	}
	if st.OldestAge < 0 || st.OldestAge > time.Minute {
		t.Fatalf("oldest age %v, want a few seconds at most", st.OldestAge)
	}
}
