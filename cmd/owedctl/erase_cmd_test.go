package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/testdb"
)

// erase tombstones the recipient's rows as the runtime role, records who
// asked, and refuses a request without a reason.
func TestErase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	due := time.Now().Add(time.Hour)
	got, err := l.Schedule(context.Background(), "acme", []ledger.NewNotification{{Recipient: "user-42", Channel: "sms",
		Kind: "k", RefID: "R-1", DueAt: due, Payload: []byte(`{"text": "secret"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runErase(ctx, w, append(args, "--database-url", db.AppURL))
		})
	}
	var usage usageError
	if _, err := run("--tenant", "acme", "--recipient", "user-42"); !errors.As(err, &usage) ||
		!strings.Contains(err.Error(), "--reason") {
		t.Errorf("without --reason: %v, want a usage error naming --reason", err)
	}
	out, err := run("--tenant", "acme", "--recipient", "user-42", "--reason", "ticket 7", "--actor", "dana")
	if err != nil || !strings.Contains(out, "1 rows are tombstones (1 cancelled)") {
		t.Fatalf("erase: %v\n%s", err, out)
	}
	d, err := l.Get(context.Background(), "acme", got[0].ID)
	if err != nil || !strings.HasPrefix(d.Recipient, ledger.ErasePrefix) ||
		d.State != ledger.StateCancelled || string(d.Payload) != "{}" {
		t.Errorf("the row after erase: %+v (%v)", d.Notification, err)
	}
	var by string
	if err := db.Owner.QueryRow(`SELECT requested_by FROM owed_erasures WHERE tenant_id = 'acme'`).Scan(&by); err != nil ||
		by != "owedctl:dana" {
		t.Errorf("owed_erasures.requested_by %q (%v), want owedctl:dana", by, err)
	}
}

// With a queue configured, erase deletes the dead letters of the rows it
// made tombstones (their reason may quote the address) and leaves the
// others. It sets the OWED_QUEUE_* variables, so it does not run in
// parallel.
func TestEraseDeletesTheRowsDeadLetters(t *testing.T) {
	s := stacktest.New(t, stacktest.Options{})
	t.Setenv("OWED_QUEUE_BACKEND", "rest")
	t.Setenv("OWED_QUEUE_URL", s.QueueURL)
	t.Setenv("OWED_QUEUE_TOKEN", stacktest.QueueToken)
	t.Setenv("OWED_QUEUE_NAME", s.Queue.Name())
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	rows := s.Schedule(t, "acme", 2, due, nil) // r0 and r1
	var msgs []queue.Message
	for _, r := range rows {
		body, err := envelope.Encode(envelope.Envelope{Tenant: "acme", ID: r.ID, DueAt: due, Key: fmt.Sprint(r.ID)})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, queue.Message{Key: fmt.Sprint(r.ID), Body: body})
	}
	if _, err := s.Queue.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var got []queue.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(got) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 2 messages", len(got))
		}
		ds, err := s.Queue.Receive(ctx, 2, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	for _, d := range got {
		if err := s.Queue.DeadLetter(ctx, d, "the carrier refused +15550001"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runErase(ctx, w, []string{"--tenant", "acme", "--recipient", "r0", "--reason", "request",
			"--database-url", s.DB.AppURL})
	})
	if err != nil || !strings.Contains(out, "1 dead letters of the erased rows deleted") {
		t.Fatalf("erase: %v\n%s", err, out)
	}
	left, _, err := s.Queue.DeadLetters(ctx, 10, "")
	if err != nil || len(left) != 1 {
		t.Fatalf("dead letters left: %d (%v), want r1's", len(left), err)
	}
	if env, err := envelope.Decode(left[0].Body); err != nil || env.ID != rows[1].ID {
		t.Errorf("the dead letter left names %+v (%v), want row %d", env, err, rows[1].ID)
	}
}
