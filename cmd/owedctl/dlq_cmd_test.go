package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/stacktest"
)

// The dlq tests set the OWED_QUEUE_* variables with t.Setenv, so they do not
// run in parallel.

// setupStackDeadLetters points the environment at a stack's queue and
// dead-letters two of three messages; it returns the queue and the dead
// letters' ids.
func setupStackDeadLetters(t *testing.T) (queue.Queue, []string, *stacktest.Stack) {
	t.Helper()
	s := stacktest.New(t, stacktest.Options{})
	t.Setenv("OWED_QUEUE_BACKEND", "rest")
	t.Setenv("OWED_QUEUE_URL", s.QueueURL)
	t.Setenv("OWED_QUEUE_TOKEN", stacktest.QueueToken)
	t.Setenv("OWED_QUEUE_NAME", s.Queue.Name())
	ctx := context.Background()
	q := s.Queue
	res, err := q.Publish(ctx, []queue.Message{
		{Key: "k-1", Body: []byte(`{"id":1}`)}, {Key: "k-2", Body: []byte(`{"id":2}`)}, {Key: "k-3", Body: []byte(`{"id":3}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var got []queue.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(got) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 3 messages", len(got))
		}
		ds, err := q.Receive(ctx, 3, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	var ids []string
	for _, d := range got {
		if d.Key == "k-3" {
			continue
		}
		if err := q.DeadLetter(ctx, d, "provider answered 400 for "+d.Key); err != nil {
			t.Fatal(err)
		}
		// The queue's id of the message is not its dead letter's; the
		// list names the dead letters.
	}
	list, _, err := ops.ListDeadLetters(ctx, q, 10, "", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list {
		ids = append(ids, d.ID)
	}
	return q, ids, s
}

func dlq(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runDLQ(ctx, w, args) })
}

func TestDLQOnTheRESTBackend(t *testing.T) {
	q, ids, s := setupStackDeadLetters(t)
	dbURL := s.DB.OperatorURL
	out, err := dlq(t, "depth")
	if err != nil || !strings.Contains(out, ": 2 dead letters") {
		t.Fatalf("dlq depth = %q, %v", out, err)
	}
	out, err = dlq(t, "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		DeadLetters []ops.DeadLetterView `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.DeadLetters) != 2 {
		t.Fatalf("dlq list --json = %s (%v); want two dead letters", out, err)
	}
	if strings.Contains(out, "next_cursor") {
		t.Errorf("dlq list --json of the last page = %s; want no next_cursor", out)
	}
	if d := list.DeadLetters[0]; d.Key == "" || !strings.Contains(d.Reason, "provider answered 400") {
		t.Errorf("dead letter %+v lacks its key or reason", d)
	}
	out, err = dlq(t, "show", ids[0])
	if err != nil || !strings.Contains(out, `"id": `) || !strings.Contains(out, "provider answered 400") {
		t.Fatalf("dlq show = %q, %v; want the reason and the body, indented", out, err)
	}
	if _, err := dlq(t, "show", "no-such-id"); err == nil {
		t.Error("dlq show of an unknown id succeeded")
	}
	// These dead letters are no owed messages: a redrive keeps them and says
	// why, it never puts them back on the queue.
	if out, err = dlq(t, "redrive", ids[0], "--json", "--database-url", dbURL); err != nil ||
		!strings.Contains(out, `"redriven": 0`) || !strings.Contains(out, "not an owed message") {
		t.Fatalf("dlq redrive = %q, %v", out, err)
	}
	if out, err = dlq(t, "delete", ids[1], "--database-url", dbURL, "--operator", "bob", "--why", "junk"); err != nil ||
		!strings.Contains(out, "deleted 1 of 1") {
		t.Fatalf("dlq delete = %q, %v", out, err)
	}
	// Both writes are on the audit trail, newest first.
	actions, err := s.Ledger.OperatorActions(context.Background(), 10)
	if err != nil || len(actions) != 2 || actions[0].Action != "dlq_delete" || actions[0].Operator != "bob" ||
		actions[0].Reason != "junk" || actions[0].Count != 1 || actions[0].Target != "ids="+ids[1] ||
		actions[1].Action != "dlq_redrive" || actions[1].Count != 0 || actions[1].Operator == "" {
		t.Errorf("audit trail after redrive and delete: %+v (%v)", actions, err)
	}
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runQueueStats(ctx, w, []string{"--json"}) })
	if err != nil {
		t.Fatal(err)
	}
	var st wire.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("queue stats --json = %s: %v", out, err)
	}
	// The kept dead letter is still there; the third message is still held.
	if st.DeadLetterDepth != 1 || st.Visible != 0 || st.InFlight != 1 {
		t.Errorf("queue stats after redrive and delete: %+v", st)
	}
	if s, err := q.Stats(context.Background()); err != nil || s != (queue.Stats{DeadLetterDepth: 1, InFlight: 1, OldestAge: s.OldestAge}) {
		t.Errorf("Stats = %+v, %v", s, err)
	}
}

func TestDLQRefusesWrongArgumentsBeforeOpeningTheQueue(t *testing.T) {
	t.Setenv("OWED_QUEUE_BACKEND", "kafka")
	for _, args := range [][]string{{"show"}, {"redrive"}, {"redrive", "dl_1", "--all"}, {"delete"}, {"list", "x"}, {"purge"},
		{"redrive", "dl_1", "--force"}, {"delete", "dl_1", "--force", "--why", "x"}} {
		var ue usageError
		if _, err := dlq(t, args...); !errors.As(err, &ue) {
			t.Errorf("dlq %v = %v, want a usage error", args, err)
		}
	}
	// A bare number is as likely a notification's id: refused, naming the
	// form dlq list prints.
	if _, err := dlq(t, "delete", "49"); err == nil || !strings.Contains(err.Error(), "dl_49") {
		t.Errorf("dlq delete 49 = %v, want a refusal naming dl_49", err)
	}
	// The arguments are right: now the backend's name is checked.
	if _, err := dlq(t, "depth"); err == nil || !strings.Contains(err.Error(), "OWED_QUEUE_BACKEND") {
		t.Errorf("dlq depth with OWED_QUEUE_BACKEND=kafka = %v, want an error naming the variable", err)
	}
}

func TestQueueFlagNamesARESTQueueOnly(t *testing.T) {
	t.Setenv("OWED_QUEUE_BACKEND", "jetstream")
	t.Setenv("OWED_NATS_URL", "nats://127.0.0.1:1")
	_, err := dlq(t, "depth", "--queue", "other")
	if err == nil || !strings.Contains(err.Error(), "--queue names a REST queue") {
		t.Errorf("dlq depth --queue on jetstream = %v, want a usage error", err)
	}
}

// A redrive is a ledger transition: the failed row is reopened under a new
// queue generation and its dead letter removed (the next sweep publishes it
// afresh), while a dead letter whose row did not fail is kept, with why.
func TestDLQRedriveReopensOnlyFailedRows(t *testing.T) {
	q, _, s := setupStackDeadLetters(t)
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	rows := s.Schedule(t, "acme", 2, due, nil)
	failed, pending := rows[0], rows[1]
	c, err := s.Ledger.ClaimForSend(ctx, "acme", failed.ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if err := s.Ledger.SettleFailed(ctx, c.Hold, "provider answered 400", nil, false); err != nil {
		t.Fatal(err)
	}
	var msgs []queue.Message
	for _, r := range rows {
		body, err := envelope.Encode(envelope.Envelope{Tenant: "acme", ID: r.ID, DueAt: due, Key: ledger.IdempotencyKey("owed-", r.ID, due)})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, queue.Message{Key: fmt.Sprintf("row-%d", r.ID), Body: body})
	}
	if _, err := q.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for n, deadline := 0, time.Now().Add(30*time.Second); n < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("dead-lettered %d of 2 row messages", n)
		}
		ds, err := q.Receive(ctx, 10, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if !strings.HasPrefix(d.Key, "row-") {
				continue
			}
			if err := q.DeadLetter(ctx, d, "failed"); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	out, err := dlq(t, "redrive", "--all", "--json", "--database-url", s.DB.OperatorURL)
	if err != nil {
		t.Fatalf("dlq redrive --all: %v", err)
	}
	var res ops.RedriveResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("dlq redrive --json = %s: %v", out, err)
	}
	if res.Redriven != 1 {
		t.Errorf("redriven %d dead letters, want 1 (only the failed row's): %s", res.Redriven, out)
	}
	if !strings.Contains(out, fmt.Sprintf("row %d: ", pending.ID)) {
		t.Errorf("the pending row's dead letter was not kept with its reason: %s", out)
	}
	got, err := s.Ledger.Get(ctx, "acme", failed.ID)
	if err != nil || got.State != ledger.StatePending || got.QueueGeneration != 1 {
		t.Errorf("failed row after redrive: state %s generation %d (%v), want pending under generation 1",
			got.State, got.QueueGeneration, err)
	}
	// The two junk dead letters of the setup and the pending row's stay.
	if st, err := q.Stats(ctx); err != nil || st.DeadLetterDepth != 3 {
		t.Errorf("dead letters after redrive: %+v (%v), want 3", st, err)
	}
}

// redrive --all narrowed by --tenant reopens only that tenant's failed rows,
// through the console's filter (ops.FindDeadLetters).
func TestDLQRedriveAllOfOneTenant(t *testing.T) {
	q, _, s := setupStackDeadLetters(t)
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	rows := map[string]ledger.Scheduled{"acme": s.Schedule(t, "acme", 1, due, nil)[0], "globex": s.Schedule(t, "globex", 1, due, nil)[0]}
	var msgs []queue.Message
	for tenant, r := range rows {
		c, err := s.Ledger.ClaimForSend(ctx, tenant, r.ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
		if err != nil || c.Outcome != ledger.ClaimSend {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if err := s.Ledger.SettleFailed(ctx, c.Hold, "provider answered 400", nil, false); err != nil {
			t.Fatal(err)
		}
		body, err := envelope.Encode(envelope.Envelope{Tenant: tenant, ID: r.ID, DueAt: due, Key: ledger.IdempotencyKey("owed-", r.ID, due)})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, queue.Message{Key: fmt.Sprintf("row-%d", r.ID), Body: body})
	}
	if _, err := q.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for n, deadline := 0, time.Now().Add(30*time.Second); n < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("dead-lettered %d of 2 row messages", n)
		}
		ds, err := q.Receive(ctx, 10, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if strings.HasPrefix(d.Key, "row-") {
				if err := q.DeadLetter(ctx, d, "failed"); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	if _, err := dlq(t, "redrive", "dl_1", "--tenant", "acme", "--database-url", s.DB.OperatorURL); err == nil {
		t.Error("--tenant without --all was accepted")
	}
	out, err := dlq(t, "redrive", "--all", "--tenant", "globex", "--json", "--database-url", s.DB.OperatorURL)
	if err != nil || !strings.Contains(out, `"redriven": 1`) {
		t.Fatalf("dlq redrive --all --tenant globex = %s, %v; want one redriven", out, err)
	}
	if got, _ := s.Ledger.Get(ctx, "globex", rows["globex"].ID); got.State != ledger.StatePending {
		t.Errorf("globex's row is %s, want pending", got.State)
	}
	if got, _ := s.Ledger.Get(ctx, "acme", rows["acme"].ID); got.State != ledger.StateFailed {
		t.Errorf("acme's row is %s, want still failed: it is not the tenant asked for", got.State)
	}
}

// deadLetterRows publishes each row's message, as the sweep would, and
// dead-letters them all.
func deadLetterRows(t *testing.T, q queue.Queue, tenant string, due time.Time, rows ...ledger.Scheduled) {
	t.Helper()
	ctx := context.Background()
	var msgs []queue.Message
	for _, r := range rows {
		body, err := envelope.Encode(envelope.Envelope{Tenant: tenant, ID: r.ID, DueAt: due, Key: ledger.IdempotencyKey("owed-", r.ID, due)})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, queue.Message{Key: fmt.Sprintf("row-%d", r.ID), Body: body})
	}
	if _, err := q.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for n, deadline := 0, time.Now().Add(30*time.Second); n < len(rows); {
		if time.Now().After(deadline) {
			t.Fatalf("dead-lettered %d of %d row messages", n, len(rows))
		}
		ds, err := q.Receive(ctx, 10, time.Second, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if strings.HasPrefix(d.Key, "row-") {
				if err := q.DeadLetter(ctx, d, "failed"); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
}

// A row whose last attempt failed permanently (the recipient bounced) is
// kept by a redrive, which says why and how to force it: sent again
// unchanged it fails the same way. --force reopens it, and needs --why.
func TestDLQRedriveOfAPermanentFailureNeedsForce(t *testing.T) {
	q, _, s := setupStackDeadLetters(t)
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	r := s.Schedule(t, "acme", 1, due, nil)[0]
	c, err := s.Ledger.ClaimForSend(ctx, "acme", r.ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	now := time.Now()
	if err := s.Ledger.SettleFailed(ctx, c.Hold, "permanent: 422 recipient bounced", &ledger.Attempt{Provider: "sandbox",
		StartedAt: now, FinishedAt: now, Outcome: ledger.AttemptPermanent, HTTPStatus: 422, Error: "422 recipient bounced"}, false); err != nil {
		t.Fatal(err)
	}
	deadLetterRows(t, q, "acme", due, r)
	out, err := dlq(t, "redrive", "--all", "--database-url", s.DB.OperatorURL)
	if err != nil || !strings.Contains(out, "redrove 0 dead letters") || !strings.Contains(out, "failed permanently (422 recipient bounced)") ||
		!strings.Contains(out, "--force") {
		t.Fatalf("dlq redrive of a permanent failure = %q, %v; want it kept, saying why and naming --force", out, err)
	}
	if got, _ := s.Ledger.Get(ctx, "acme", r.ID); got.State != ledger.StateFailed {
		t.Fatalf("the row is %s after an unforced redrive, want failed", got.State)
	}
	var ue usageError
	if _, err := dlq(t, "redrive", "--all", "--force", "--database-url", s.DB.OperatorURL); !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "--why") {
		t.Fatalf("--force without --why = %v, want a usage error naming --why", err)
	}
	out, err = dlq(t, "redrive", "--all", "--force", "--why", "address corrected", "--operator", "carol",
		"--database-url", s.DB.OperatorURL)
	if err != nil || !strings.Contains(out, "redrove 1 dead letters") {
		t.Fatalf("dlq redrive --force = %q, %v; want the row reopened", out, err)
	}
	if got, _ := s.Ledger.Get(ctx, "acme", r.ID); got.State != ledger.StatePending {
		t.Errorf("the row is %s after a forced redrive, want pending", got.State)
	}
	actions, err := s.Ledger.OperatorActions(ctx, 1)
	if err != nil || len(actions) != 1 || actions[0].Operator != "carol" || actions[0].Reason != "address corrected" || actions[0].Count != 1 {
		t.Errorf("the forced redrive's audit line: %+v (%v)", actions, err)
	}
}
