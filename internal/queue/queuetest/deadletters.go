package queuetest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/rest"
)

// The contract on dead letters: when a message is dead-lettered, listing,
// paging, redrive and delete.

func testDeadLetterAfterMaxReceives(t *testing.T, s *suite) {
	id := s.publish(t, "d", map[string]string{"to": "x"}).MessageID
	for i := 1; i <= MaxReceives; i++ {
		m := s.consumeOne(t, time.Minute)
		if m.ReceiveCount != i {
			t.Fatalf("delivery %d: receive_count=%d", i, m.ReceiveCount)
		}
		dead := s.nack(t, m.MessageID, rest.NackOptions{CountAsFailure: true, Reason: fmt.Sprintf("boom %d", i)})
		if dead != (i == MaxReceives) {
			t.Fatalf("counted nack %d: dead_lettered=%v, want %v", i, dead, i == MaxReceives)
		}
	}
	s.expectEmpty(t, 0)
	page, err := s.c.ListDeadLetters(s.ctx, rest.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(page.DeadLetters))
	}
	d := page.DeadLetters[0]
	if d.MessageID != id || d.ReceiveCount != MaxReceives || d.LastError != "boom 5" || d.IdempotencyKey != "d" ||
		string(d.Payload) != `{"to":"x"}` || d.DeadLetteredAt.IsZero() {
		t.Fatalf("dead letter: %+v", d)
	}
	if st := s.stats(t); st.DeadLetterDepth != 1 || st.Visible+st.InFlight+st.Delayed != 0 {
		t.Fatalf("stats: %+v, want only dead_letter_depth=1", st)
	}
}

// deadLetter publishes a message and dead-letters it at once.
func (s *suite) deadLetter(t *testing.T, key string) string {
	t.Helper()
	s.publish(t, key, key)
	m := s.consumeOne(t, time.Minute)
	if !s.nack(t, m.MessageID, rest.NackOptions{DeadLetter: true, Reason: "test " + key}) {
		t.Fatalf("dead_letter nack of %s did not dead-letter", key)
	}
	return m.MessageID
}

func testRedrive(t *testing.T, s *suite) {
	id1 := s.deadLetter(t, "r1")
	id2 := s.deadLetter(t, "r2")
	if n, err := s.c.Redrive(s.ctx, id1); err != nil || n != 1 {
		t.Fatalf("redrive %s: %d, %v", id1, n, err)
	}
	m := s.consumeOne(t, time.Minute)
	if m.MessageID != id1 || m.ReceiveCount != 1 {
		t.Fatalf("after redrive: got %s receive_count=%d, want %s with the count reset to 1", m.MessageID, m.ReceiveCount, id1)
	}
	if n, err := s.c.RedriveAll(s.ctx); err != nil || n != 1 {
		t.Fatalf("redrive all: %d, %v; want 1", n, err)
	}
	if m := s.consumeOne(t, time.Minute); m.MessageID != id2 || m.ReceiveCount != 1 {
		t.Fatalf("after redrive all: got %s receive_count=%d, want %s and 1", m.MessageID, m.ReceiveCount, id2)
	}
	if st := s.stats(t); st.DeadLetterDepth != 0 {
		t.Fatalf("stats: %+v, want no dead letters", st)
	}
}

func testDeleteDeadLetter(t *testing.T, s *suite) {
	id := s.deadLetter(t, "del")
	d, err := s.c.DeadLetterByID(s.ctx, id)
	if err != nil || d.MessageID != id || d.LastError != "test del" {
		t.Fatalf("dead letter %s: %+v, %v", id, d, err)
	}
	if n, err := s.c.DeleteDeadLetters(s.ctx, id); err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	_, err = s.c.DeadLetterByID(s.ctx, id)
	apiError(t, err, http.StatusNotFound)
	if n, err := s.c.DeleteDeadLetters(s.ctx, id); err != nil || n != 0 {
		t.Fatalf("second delete: %d, %v; want 0, nil", n, err)
	}
}

func testDeadLetterPaging(t *testing.T, s *suite) {
	ids := []string{s.deadLetter(t, "p1"), s.deadLetter(t, "p2"), s.deadLetter(t, "p3")}
	page, err := s.c.ListDeadLetters(s.ctx, rest.DeadLetterQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %d letters, cursor %q; want 2 and a cursor", len(page.DeadLetters), page.NextCursor)
	}
	next, err := s.c.ListDeadLetters(s.ctx, rest.DeadLetterQuery{Limit: 2, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.DeadLetters) != 1 || next.NextCursor != "" {
		t.Fatalf("second page: %d letters, cursor %q; want 1 and none", len(next.DeadLetters), next.NextCursor)
	}
	seen := map[string]bool{}
	for _, d := range append(page.DeadLetters, next.DeadLetters...) {
		seen[d.MessageID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("paging lost %s", id)
		}
	}
	only, err := s.c.ListDeadLetters(s.ctx, rest.DeadLetterQuery{IDs: []string{ids[1]}})
	if err != nil || len(only.DeadLetters) != 1 || only.DeadLetters[0].MessageID != ids[1] {
		t.Fatalf("ids filter: %+v, %v", only, err)
	}
}
