package ledger

import (
	"strings"
	"testing"
	"time"
)

// leaseOne leases everything owed and returns the one row with id, failing
// the test when it is not there.
func leaseOne(t *testing.T, b *bundle, id int64) Leased {
	t.Helper()
	got, err := b.l.Lease(ctx, leaseAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("lease returned %+v, want row %d among them", got, id)
	return Leased{}
}

func queueKey(r Leased) string { return QueueKey("owed-", r.ID, r.DueAt, r.QueueGeneration) }

func mustFail(t *testing.T, b *bundle, tenant string, id int64, due time.Time, a *Attempt) {
	t.Helper()
	h := mustClaim(t, b, tenant, id, ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err := b.l.SettleFailed(ctx, h, "permanent: 400 bad number", a, false); err != nil {
		t.Fatal(err)
	}
}

// A queued row whose lease ran out is republished deliberately (its message
// was lost, acked or dead-lettered), so its message gets a new queue key
// while the provider's key stays the row's. A repeat of a publish that was
// never marked (the sweep died between publish and mark) keeps its key, so
// a deduplicating queue absorbs it.
func TestRequeuedRowGetsANewQueueKey(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	queued, unmarked := s[0].ID, s[1].ID
	first := leaseOne(t, b, queued) // leases the unmarked row too
	if first.QueueGeneration != 0 || first.Republish {
		t.Fatalf("first lease: %+v, want generation 0, not a republish", first)
	}
	if _, err := b.l.MarkQueued(ctx, []int64{queued}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := queueKey(first); got != IdempotencyKey("owed-", queued, b.now)+"-g0" {
		t.Errorf("queue key %q, want the idempotency key plus -g0", got)
	}
	b.advance(11 * time.Minute)
	got, err := b.l.Lease(ctx, leaseAll)
	if err != nil || len(got) != 2 {
		t.Fatalf("requeue lease: %+v %v, want both rows", got, err)
	}
	for _, r := range got {
		switch r.ID {
		case queued:
			if !r.Republish || r.QueueGeneration != 1 || queueKey(r) == queueKey(first) {
				t.Errorf("requeued row: %+v key %q, want a republish under generation 1 and a new key", r, queueKey(r))
			}
			if IdempotencyKey("owed-", r.ID, r.DueAt) != IdempotencyKey("owed-", first.ID, first.DueAt) {
				t.Errorf("the provider's key changed with the requeue")
			}
		case unmarked:
			if r.Republish || r.QueueGeneration != 0 {
				t.Errorf("row never marked published: %+v, want the same generation 0 (its message is absorbed)", r)
			}
		}
	}
	if d, _ := b.l.Get(ctx, "acme", queued); d.QueueGeneration != 1 {
		t.Errorf("row reads generation %d, want 1", d.QueueGeneration)
	}
}

// A snooze and un-snooze back to a due time already published must not
// reuse that publish's queue key: the worker acked the old message as stale
// meanwhile, and a queue that deduplicates would drop the new one.
func TestRescheduledAwayAndBackGetsANewQueueKey(t *testing.T) {
	b := setup(t)
	due := b.now
	s := mustSchedule(t, b, "acme", row("a", "TICKET-1", due))
	first := leaseOne(t, b, s[0].ID)
	if _, err := b.l.MarkQueued(ctx, []int64{s[0].ID}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, to := range []time.Time{due.Add(time.Hour), due} {
		if res, err := b.l.Reschedule(ctx, "acme", "follow_up", "TICKET-1", to); err != nil || res.Changed != 1 {
			t.Fatalf("reschedule to %s: %+v %v", to, res, err)
		}
	}
	again := leaseOne(t, b, s[0].ID)
	if !again.DueAt.Equal(first.DueAt) || again.Republish || again.QueueGeneration != 2 {
		t.Errorf("after away and back: %+v, want due %s, generation 2, a first publish of the new key", again, due)
	}
	if queueKey(again) == queueKey(first) {
		t.Errorf("away and back reused the queue key %q", queueKey(first))
	}
	if IdempotencyKey("owed-", again.ID, again.DueAt) != IdempotencyKey("owed-", first.ID, first.DueAt) {
		t.Errorf("the provider's key differs for the same due time")
	}
}

// A failed row is final: a copy of its message (a stray, or one redriven
// from the dead letters) is refused, and no sweep leases it. Redrive reopens
// it under a new generation, and it is leased, claimed and delivered.
func TestFailedRowIsClaimableOnlyAfterRedrive(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now))
	id := s[0].ID
	first := leaseOne(t, b, id)
	b.l.MarkQueued(ctx, []int64{id}, 10*time.Minute)
	mustFail(t, b, "acme", id, b.now, &Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now,
		Outcome: AttemptPermanent, HTTPStatus: 400, Error: "bad number"})

	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute}
	if c, err := b.l.ClaimForSend(ctx, "acme", id, p); err != nil || c.Outcome != ClaimSettled {
		t.Errorf("claim of a failed row's message: %v (err %v), want settled (ack and drop)", c.Outcome, err)
	}
	b.advance(time.Hour)
	if got, _ := b.l.Lease(ctx, leaseAll); len(got) != 0 {
		t.Errorf("a failed row was leased: %+v", got)
	}
	if d, _ := b.l.Get(ctx, "acme", id); d.State != StateFailed || d.SettledAt == nil {
		t.Fatalf("after the stray copy: %s settled=%v, want failed and settled", d.State, d.SettledAt)
	}

	// Its last attempt failed permanently: a plain redrive keeps it failed
	// and says why; on-call's forced redrive reopens it.
	res, err := b.l.Redrive(ctx, "acme", id)
	if err != nil || len(res) != 1 || res[0].Reopened || !res[0].Permanent || res[0].State != StateFailed ||
		!strings.HasPrefix(res[0].Reason, ErrPermanentNeedsForce+" (bad number)") || !strings.Contains(res[0].Reason, "force") {
		t.Fatalf("redrive of a permanent failure: %+v %v, want it kept, saying why and how to force it", res, err)
	}
	res, err = New(b.db.Operator, b.clk).RedriveAny(ctx, OperatorAction{Operator: "alice", Target: "test",
		Reason: "number corrected"}, true, id)
	if err != nil {
		t.Fatal(err)
	}
	want := Redriven{ID: id, Tenant: "acme", Reopened: true, State: StatePending, QueueGeneration: 1, Permanent: true}
	if len(res) != 1 || res[0] != want {
		t.Fatalf("forced redrive: %+v, want %+v", res, want)
	}
	d, err := b.l.Get(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StatePending || d.SettledAt != nil || d.LeaseUntil != nil || d.PublishedAt != nil ||
		d.Attempts != 1 || d.QueueGeneration != 1 || !d.UpdatedAt.Equal(b.now) ||
		!strings.HasPrefix(d.LastError, "redriven after: permanent: 400 bad number") {
		t.Errorf("redriven row: %+v", d.Notification)
	}

	again := leaseOne(t, b, id)
	if again.QueueGeneration != 1 || again.Republish || queueKey(again) == queueKey(first) {
		t.Errorf("lease after redrive: %+v key %q, want generation 1 under a new key", again, queueKey(again))
	}
	b.l.MarkQueued(ctx, []int64{id}, 10*time.Minute)
	c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: first.DueAt, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ClaimSend || c.PossibleDuplicate {
		t.Fatalf("claim after redrive: %v dup=%v err=%v, want send, not flagged", c.Outcome, c.PossibleDuplicate, err)
	}
	changed, err := b.l.SettleDelivered(ctx, c.Hold, Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now,
		ProviderMessageID: "m-1"})
	if err != nil || !changed {
		t.Fatalf("settle delivered after redrive: %v %v", changed, err)
	}
	if d, _ := b.l.Get(ctx, "acme", id); d.State != StateDelivered || d.Attempts != 2 || len(d.History) != 2 {
		t.Errorf("delivered after redrive: state=%s attempts=%d history=%d", d.State, d.Attempts, len(d.History))
	}
}

// Redrive reopens only failed, unexpired rows of the caller's scope; every
// other row is left exactly as it was, and the answer says why.
func TestRedriveOfARowNotFailedChangesNothing(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(5 * time.Minute)
	expiring := row("e", "MEET", b.now)
	expiring.ExpiresAt = &exp
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("p", "T-2", b.now), expiring, row("f", "T-4", b.now))
	delivered, pending, expiredFailed, failed := s[0].ID, s[1].ID, s[2].ID, s[3].ID
	other := mustSchedule(t, b, "globex", row("g", "G-1", b.now))[0].ID
	h := mustClaim(t, b, "acme", delivered, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	b.l.SettleDelivered(ctx, h, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now})
	mustFail(t, b, "acme", expiredFailed, b.now, nil)
	mustFail(t, b, "acme", failed, b.now, nil)
	mustFail(t, b, "globex", other, b.now, nil)
	b.advance(10 * time.Minute) // past the meeting

	before := map[int64]Notification{}
	for _, id := range []int64{delivered, pending, expiredFailed} {
		d, _ := b.l.Get(ctx, "acme", id)
		before[id] = d.Notification
	}
	b.advance(time.Minute) // a change would now move updated_at
	res, err := b.l.Redrive(ctx, "acme", delivered, pending, expiredFailed, other, 999999, failed, failed)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id       int64
		reopened bool
		state    State
		reason   string
	}{
		{delivered, false, StateDelivered, "row is delivered: only a failed row is redriven"},
		{pending, false, StatePending, "row is pending: only a failed row is redriven"},
		{expiredFailed, false, StateFailed, "row expired at " + exp.Format(time.RFC3339)},
		{other, false, "", "not found"}, // another tenant's row is invisible
		{999999, false, "", "not found"},
		{failed, true, StatePending, ""},
		{failed, false, StatePending, "listed twice"},
	}
	if len(res) != len(want) {
		t.Fatalf("redrive answered %+v, want %d answers", res, len(want))
	}
	for i, w := range want {
		r := res[i]
		if r.ID != w.id || r.Reopened != w.reopened || r.State != w.state || !strings.HasPrefix(r.Reason, w.reason) ||
			(w.reason == "") != (r.Reason == "") {
			t.Errorf("answer %d: %+v, want id %d reopened=%v state %q reason %q…", i, r, w.id, w.reopened, w.state, w.reason)
		}
	}
	for id, was := range before {
		d, _ := b.l.Get(ctx, "acme", id)
		if d.Notification.UpdatedAt != was.UpdatedAt || d.State != was.State || d.QueueGeneration != was.QueueGeneration ||
			d.LastError != was.LastError {
			t.Errorf("row %d changed: %+v, was %+v", id, d.Notification, was)
		}
	}
	if d, _ := b.l.GetAny(ctx, other); d.State != StateFailed {
		t.Errorf("another tenant's row is %s after a redrive outside its scope", d.State)
	}
	// The operator's cross-tenant redrive reaches it, as on-call's login,
	// and writes its audit line.
	oncall := New(b.db.Operator, b.clk)
	by := OperatorAction{Operator: "alice", Action: "dlq_redrive", Target: "test", Reason: "fixed"}
	if _, err := b.l.RedriveAny(ctx, by, false, other); err == nil || !strings.Contains(err.Error(), "audit") {
		t.Errorf("RedriveAny as the services' role: %v, want the audit line refused", err)
	}
	if res, err := oncall.RedriveAny(ctx, by, false, other); err != nil || len(res) != 1 || !res[0].Reopened || res[0].Tenant != "globex" {
		t.Errorf("RedriveAny: %+v %v, want globex's row reopened", res, err)
	}
	if got, err := oncall.OperatorActions(ctx, 1); err != nil || len(got) != 1 || got[0].Action != "dlq_redrive" ||
		got[0].Operator != "alice" || got[0].Count != 1 || got[0].Reason != "fixed" {
		t.Errorf("the audit trail after RedriveAny: %+v %v", got, err)
	}
	if res, err := b.l.Redrive(ctx, "acme"); err != nil || res != nil {
		t.Errorf("redrive of nothing: %+v %v", res, err)
	}
	if _, err := b.l.Redrive(ctx, "", failed); err == nil || !strings.Contains(err.Error(), "tenant_id") {
		t.Errorf("redrive without a tenant: %v", err)
	}
}

// A row whose earlier send may have reached the provider stays marked
// through a redrive: the send after it is flagged a possible duplicate.
func TestRedriveKeepsThePossibleDuplicateMark(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute}
	h := mustClaim(t, b, "acme", id, p)
	if err := b.l.ReleaseClaim(ctx, h, 0, 0, "timeout", &Attempt{Provider: "p", StartedAt: b.now,
		FinishedAt: b.now, Outcome: AttemptTransient, Error: "timeout"}, true); err != nil {
		t.Fatal(err)
	}
	c, err := b.l.ClaimForSend(ctx, "acme", id, p)
	if err != nil || !c.PossibleDuplicate {
		t.Fatalf("claim after an uncertain send: %v dup=%v err=%v", c.Outcome, c.PossibleDuplicate, err)
	}
	if err := b.l.SettleFailed(ctx, c.Hold, "attempts exhausted", &Attempt{Provider: "p", StartedAt: b.now,
		FinishedAt: b.now, Outcome: AttemptTransient, Error: "503", PossibleDuplicate: true}, false); err != nil {
		t.Fatal(err)
	}
	if res, err := b.l.Redrive(ctx, "acme", id); err != nil || !res[0].Reopened {
		t.Fatalf("redrive: %+v %v", res, err)
	}
	leaseOne(t, b, id)
	if c, err := b.l.ClaimForSend(ctx, "acme", id, p); err != nil || c.Outcome != ClaimSend || !c.PossibleDuplicate {
		t.Errorf("claim after redrive of a marked row: %v dup=%v err=%v, want send flagged", c.Outcome, c.PossibleDuplicate, err)
	}
}
