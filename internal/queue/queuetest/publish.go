package queuetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
)

// The contract on publishing: keys, dedup and batches.

func testPublishConsumeAck(t *testing.T, s *suite) {
	before := time.Now().Add(-time.Minute)
	r := s.publish(t, "k1", map[string]any{"hello": "world", "n": 1})
	if r.MessageID == "" || r.Deduplicated {
		t.Fatalf("publish: got %+v, want a new message id", r)
	}
	m := s.consumeOne(t, time.Minute)
	if m.MessageID != r.MessageID || m.ReceiveCount != 1 || m.IdempotencyKey != "k1" {
		t.Fatalf("consume: got id=%s receive_count=%d key=%q, want id=%s 1 k1", m.MessageID, m.ReceiveCount, m.IdempotencyKey, r.MessageID)
	}
	if string(m.Payload) != `{"hello":"world","n":1}` {
		t.Fatalf("payload changed: %s", m.Payload)
	}
	if m.PublishedAt.Before(before) || m.PublishedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("published_at %s is not about now", m.PublishedAt)
	}
	if n, err := s.c.AckIDs(s.ctx, m.MessageID); err != nil || n != 1 {
		t.Fatalf("ack: got %d, %v; want 1, nil", n, err)
	}
	// Acking again, or an id that never existed, is not an error.
	if n, err := s.c.AckIDs(s.ctx, m.MessageID, "no-such-message", "999999999999"); err != nil || n != 0 {
		t.Fatalf("second ack: got %d, %v; want 0, nil", n, err)
	}
	if st := s.stats(t); st.Visible+st.InFlight+st.Delayed+st.DeadLetterDepth != 0 {
		t.Fatalf("stats after ack: %+v, want all zero", st)
	}
}

func testDedupWithinWindow(t *testing.T, s *suite) {
	first := s.publish(t, "same", "one")
	second := s.publish(t, "same", "two")
	if !second.Deduplicated || second.MessageID != first.MessageID {
		t.Fatalf("second publish: got %+v, want deduplicated with id %s", second, first.MessageID)
	}
	msgs := s.consume(t, 10, time.Second, time.Minute)
	if len(msgs) != 1 || string(msgs[0].Payload) != `"one"` {
		t.Fatalf("consume: got %d messages, want only the first one", len(msgs))
	}
}

func testDedupAfterAck(t *testing.T, s *suite) {
	first := s.publish(t, "acked", "one")
	m := s.consumeOne(t, time.Minute)
	if _, err := s.c.AckIDs(s.ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	again := s.publish(t, "acked", "one")
	if !again.Deduplicated || again.MessageID != first.MessageID {
		t.Fatalf("publish after ack: got %+v, want deduplicated with id %s", again, first.MessageID)
	}
	s.expectEmpty(t, time.Second)
}

func testDedupAfterDeadLetter(t *testing.T, s *suite) {
	first := s.publish(t, "dead", "one")
	m := s.consumeOne(t, time.Minute)
	if !s.nack(t, m.MessageID, rest.NackOptions{DeadLetter: true, Reason: "permanent: bad address"}) {
		t.Fatal("nack dead_letter:true did not dead-letter")
	}
	again := s.publish(t, "dead", "one")
	if !again.Deduplicated || again.MessageID != first.MessageID {
		t.Fatalf("publish after dead-letter: got %+v, want deduplicated with id %s", again, first.MessageID)
	}
	// Deleting the dead letter does not forget the key either.
	if n, err := s.c.DeleteDeadLetters(s.ctx, m.MessageID); err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	if again := s.publish(t, "dead", "one"); !again.Deduplicated {
		t.Fatalf("publish after delete: got %+v, want deduplicated", again)
	}
	s.expectEmpty(t, 0)
}

func testBatchPerMessageKeys(t *testing.T, s *suite) {
	res, err := s.c.PublishBatch(s.ctx, []rest.Entry{
		{Payload: payload("a"), IdempotencyKey: "a"},
		{Payload: payload("b"), IdempotencyKey: "b"},
		{Payload: payload("a again"), IdempotencyKey: "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != rest.StatusCreated || res[1].Status != rest.StatusCreated {
		t.Fatalf("first batch: %+v, want a and b created", res)
	}
	if res[2].Status != rest.StatusDeduplicated || res[2].MessageID != res[0].MessageID {
		t.Fatalf("a key repeated within a batch: %+v, want deduplicated with %s", res[2], res[0].MessageID)
	}
	res2, err := s.c.PublishBatch(s.ctx, []rest.Entry{
		{Payload: payload("b"), IdempotencyKey: "b"},
		{Payload: payload("c"), IdempotencyKey: "c"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res2[0].Status != rest.StatusDeduplicated || res2[0].MessageID != res[1].MessageID {
		t.Fatalf("b in the second batch: %+v, want deduplicated with %s", res2[0], res[1].MessageID)
	}
	if res2[1].Status != rest.StatusCreated {
		t.Fatalf("c in the second batch: %+v, want created", res2[1])
	}
	msgs := s.consume(t, 10, time.Second, time.Minute)
	if len(msgs) != 3 {
		t.Fatalf("consume: got %d messages, want 3 (a, b, c)", len(msgs))
	}
}

func testBatchSplit(t *testing.T, s *suite) {
	const n = wire.MaxBatch + 50
	msgs := make([]rest.Entry, n)
	for i := range msgs {
		msgs[i] = rest.Entry{Payload: payload(i), IdempotencyKey: fmt.Sprintf("k%d", i)}
	}
	res, err := s.c.PublishBatch(s.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != n {
		t.Fatalf("got %d results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Status != rest.StatusCreated {
			t.Fatalf("result %d: %+v, want created", i, r)
		}
	}
	if st := s.stats(t); st.Visible != n {
		t.Fatalf("stats: visible=%d, want %d", st.Visible, n)
	}
}

func testBatchEntryFailure(t *testing.T, s *suite) {
	res, err := s.c.PublishBatch(s.ctx, []rest.Entry{
		{Payload: payload("ok"), IdempotencyKey: "ok"},
		{Payload: payload("no key")},
		{Payload: payload("late"), IdempotencyKey: "late", Delay: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != rest.StatusCreated || res[2].Status != rest.StatusCreated {
		t.Fatalf("valid entries: %+v, want created", res)
	}
	if res[1].Status != rest.StatusFailed || !strings.Contains(res[1].Reason, "idempotency_key") {
		t.Fatalf("entry without a key: %+v, want failed naming idempotency_key", res[1])
	}
	if st := s.stats(t); st.Visible != 1 || st.Delayed != 1 {
		t.Fatalf("stats: %+v, want visible=1 delayed=1", st)
	}
}
