package queuetest

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/rest"
)

// The contract on delivery: visibility timeouts, extend, nack, the long poll
// and stats.

func testVisibilityRedelivery(t *testing.T, s *suite) {
	id := s.publish(t, "v", "v").MessageID
	m := s.consumeOne(t, time.Second)
	leased := time.Now()
	s.expectEmpty(t, 0)
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != id || again.ReceiveCount != 2 {
		t.Fatalf("redelivery: got id=%s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(leased); d < 900*time.Millisecond {
		t.Fatalf("redelivered after %s, before the 1 s visibility timeout ran out", d)
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
	s.publish(t, "n", "n")
	m := s.consumeOne(t, time.Minute)
	if s.nack(t, m.MessageID, rest.NackOptions{Delay: time.Second, CountAsFailure: true, Reason: "provider 500"}) {
		t.Fatal("first counted nack dead-lettered")
	}
	nacked := time.Now()
	if st := s.stats(t); st.Delayed != 1 || st.InFlight != 0 {
		t.Fatalf("stats after nack: %+v, want delayed=1", st)
	}
	s.expectEmpty(t, 0)
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != m.MessageID || again.ReceiveCount != 2 {
		t.Fatalf("after nack: got %s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(nacked); d < 900*time.Millisecond {
		t.Fatalf("returned after %s, before its 1 s delay", d)
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
	start := time.Now()
	s.expectEmpty(t, time.Second)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("an empty 1 s long poll returned after %s", d)
	}
	type result struct {
		msgs []rest.Delivery
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		t0 := time.Now()
		msgs, err := s.c.Consume(s.ctx, rest.ConsumeOptions{MaxMessages: 1, Wait: 15 * time.Second, VisibilityTimeout: time.Minute})
		done <- result{msgs, err, time.Since(t0)}
	}()
	<-started
	// The publish may land before or during the wait; either way the
	// consume must answer well before its 15 s are up.
	time.Sleep(300 * time.Millisecond)
	s.publish(t, "lp", "lp")
	r := <-done
	if r.err != nil || len(r.msgs) != 1 {
		t.Fatalf("long poll: %d messages, %v", len(r.msgs), r.err)
	}
	if r.took > 5*time.Second {
		t.Fatalf("long poll answered after %s, want soon after the publish", r.took)
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
