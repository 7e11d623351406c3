package ledger

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

// intentOf is a row's intent columns (owed_notifications.intent*,
// internal/ledger/sql/notifications.sql).
type intentOf struct {
	Intent, Outcome string // "" when NULL
	DueAt           *time.Time
}

// readIntent reads row id's intent as the application role, in tenant's
// scope: what the trigger wrote must be visible there under FORCE RLS.
func readIntent(t *testing.T, b *bundle, tn string, id int64) intentOf {
	t.Helper()
	var intent, outcome sql.NullString
	var due sql.NullTime
	if err := tenant.InTx(ctx, b.db.App, tn, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT intent, intent_outcome, intent_due_at FROM owed_notifications WHERE id = $1`, id).
			Scan(&intent, &outcome, &due)
	}); err != nil {
		t.Fatalf("read intent of row %d: %v", id, err)
	}
	in := intentOf{Intent: intent.String, Outcome: outcome.String}
	if due.Valid {
		d := due.Time.UTC()
		in.DueAt = &d
	}
	return in
}

// claimAt takes row id for a send (a lease of a minute), failing unless
// the claim took it.
func claimAt(t *testing.T, b *bundle, id int64, due time.Time) Claim {
	t.Helper()
	c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ClaimSend {
		t.Fatalf("claim of row %d: %v %v, want send", id, c.Outcome, err)
	}
	return c
}

// handBack releases a claimed row as the worker does when the provider's
// pace has no slot for it: no attempt, its message back in a second.
func handBack(t *testing.T, b *bundle, id int64) {
	t.Helper()
	if err := b.l.ReleaseClaim(ctx, heldNow(t, b, id), time.Second, time.Minute,
		"waiting for the provider's pace", nil, false); err != nil {
		t.Fatalf("release row %d: %v", id, err)
	}
}

func mustGet(t *testing.T, b *bundle, id int64) Detail {
	t.Helper()
	d, err := b.l.Get(ctx, "acme", id)
	if err != nil {
		t.Fatalf("get row %d: %v", id, err)
	}
	return d
}

func wantChange(t *testing.T, what string, got ChangeResult, err error, want ChangeResult) {
	t.Helper()
	if err != nil || got != want {
		t.Fatalf("%s: %+v (err %v), want %+v", what, got, err, want)
	}
}

// A cancel that lands while a worker holds the claim is recorded, and the
// release that follows (the pace had no slot) settles the row cancelled: it
// is never sent, however its message comes back.
func TestCancelInFlightHoldsThroughRelease(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	claimAt(t, b, id, b.now)

	res, err := b.l.Cancel(ctx, "globex", "follow_up", "T-1")
	wantChange(t, "another tenant's cancel", res, err, ChangeResult{})
	res, err = b.l.Cancel(ctx, "acme", "follow_up", "T-1")
	wantChange(t, "cancel in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	if d := mustGet(t, b, id); d.State != StateSending {
		t.Fatalf("row is %s after the cancel, want still sending (its worker holds it)", d.State)
	}
	if in := readIntent(t, b, "acme", id); in.Intent != "cancel" || in.Outcome != "" {
		t.Fatalf("intent %+v, want a cancel waiting", in)
	}

	handBack(t, b, id)
	d := mustGet(t, b, id)
	if d.State != StateCancelled || d.SettledAt == nil || d.LeaseUntil != nil || d.Attempts != 0 {
		t.Fatalf("after the release: %s settled %v lease %v attempts %d, want cancelled, settled, unleased, no attempt",
			d.State, d.SettledAt, d.LeaseUntil, d.Attempts)
	}
	if in := readIntent(t, b, "acme", id); in.Outcome != "applied" {
		t.Errorf("intent %+v, want outcome applied", in)
	}
	b.advance(2 * time.Second)
	if c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: b.now.Add(-2 * time.Second), LeaseFor: time.Minute}); err != nil || c.Outcome != ClaimSettled {
		t.Errorf("claim of the message handed back: %v %v, want settled (nothing sent)", c.Outcome, err)
	}
	if got, err := b.l.Lease(ctx, leaseAll); err != nil || len(got) != 0 {
		t.Errorf("the sweep leased %+v (%v), want nothing", got, err)
	}
}

// A snooze that lands while a worker holds the claim moves the row when the
// worker hands it back: pending at the new due time, its expiry shifted,
// under a new queue generation, so the message handed back is stale and
// the next publish has a new queue key.
func TestRescheduleInFlightHoldsThroughRelease(t *testing.T) {
	b := setup(t)
	due := b.now
	exp := due.Add(time.Hour)
	r := row("a", "T-1", due)
	r.ExpiresAt = &exp
	id := mustSchedule(t, b, "acme", r)[0].ID
	first := leaseOne(t, b, id)
	if _, err := b.l.MarkQueued(ctx, []int64{id}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	claimAt(t, b, id, due)

	newDue := due.Add(2 * time.Hour)
	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", newDue)
	wantChange(t, "snooze in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	if d := mustGet(t, b, id); d.State != StateSending || !d.DueAt.Equal(due) {
		t.Fatalf("row is %s due %s after the snooze, want still sending at %s", d.State, d.DueAt, due)
	}

	handBack(t, b, id)
	d := mustGet(t, b, id)
	if d.State != StatePending || !d.DueAt.Equal(newDue) || d.ExpiresAt == nil || !d.ExpiresAt.Equal(exp.Add(2*time.Hour)) ||
		d.LeaseUntil != nil || d.PublishedAt != nil || d.QueueGeneration != first.QueueGeneration+1 {
		t.Fatalf("after the release: %s due %s expires %v lease %v published %v generation %d; want pending due %s, "+
			"expiring %s, unleased, unpublished, generation %d", d.State, d.DueAt, d.ExpiresAt, d.LeaseUntil,
			d.PublishedAt, d.QueueGeneration, newDue, exp.Add(2*time.Hour), first.QueueGeneration+1)
	}
	if in := readIntent(t, b, "acme", id); in.Outcome != "applied" || in.DueAt == nil || !in.DueAt.Equal(newDue) {
		t.Errorf("intent %+v, want a reschedule to %s, applied", in, newDue)
	}
	b.advance(2 * time.Second)
	if c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: due, LeaseFor: time.Minute}); err != nil || c.Outcome != ClaimStale {
		t.Errorf("claim of the message handed back: %v %v, want stale", c.Outcome, err)
	}
	if got, err := b.l.Lease(ctx, leaseAll); err != nil || len(got) != 0 {
		t.Errorf("the sweep leased %+v (%v) two hours early", got, err)
	}
	b.advance(2 * time.Hour)
	next := leaseOne(t, b, id)
	if !next.DueAt.Equal(newDue) || queueKey(next) == queueKey(first) {
		t.Errorf("lease at the new time: %+v key %q, want due %s under a new queue key (was %q)", next, queueKey(next), newDue, queueKey(first))
	}
	claimAt(t, b, id, newDue)
}

// A claim whose lease ran out with an intent waiting (its worker died
// mid-send) is not taken over as it stands: the next claim applies the
// intent first, so a cancelled row is never sent again and a snoozed one
// waits for its new time (still marked a possible duplicate, since the lost
// send may have reached the provider).
func TestClaimAfterALostOneAppliesTheIntent(t *testing.T) {
	b := setup(t)
	due := b.now
	cancelled := mustSchedule(t, b, "acme", row("a", "T-1", due))[0].ID
	snoozed := mustSchedule(t, b, "acme", row("a", "T-2", due))[0].ID
	claimAt(t, b, cancelled, due)
	claimAt(t, b, snoozed, due)
	res, err := b.l.Cancel(ctx, "acme", "follow_up", "T-1")
	wantChange(t, "cancel in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	newDue := due.Add(time.Hour)
	res, err = b.l.Reschedule(ctx, "acme", "follow_up", "T-2", newDue)
	wantChange(t, "snooze in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})

	b.advance(2 * time.Minute)
	if c, err := b.l.ClaimForSend(ctx, "acme", cancelled, ClaimParams{DueAt: due, LeaseFor: time.Minute}); err != nil || c.Outcome != ClaimSettled {
		t.Fatalf("claim after the lost one, cancel waiting: %v %v, want settled", c.Outcome, err)
	}
	if d := mustGet(t, b, cancelled); d.State != StateCancelled {
		t.Errorf("row with a cancel waiting is %s after the next claim, want cancelled", d.State)
	}
	if in := readIntent(t, b, "acme", cancelled); in.Outcome != "applied" {
		t.Errorf("cancel intent %+v, want applied", in)
	}
	if c, err := b.l.ClaimForSend(ctx, "acme", snoozed, ClaimParams{DueAt: due, LeaseFor: time.Minute}); err != nil || c.Outcome != ClaimStale {
		t.Fatalf("claim after the lost one, snooze waiting: %v %v, want stale", c.Outcome, err)
	}
	if d := mustGet(t, b, snoozed); d.State != StatePending || !d.DueAt.Equal(newDue) {
		t.Errorf("snoozed row is %s due %s after the next claim, want pending due %s", d.State, d.DueAt, newDue)
	}
	b.advance(2 * time.Hour)
	if c := claimAt(t, b, snoozed, newDue); !c.PossibleDuplicate {
		t.Errorf("the send at the new time is not marked a possible duplicate of the lost one")
	}
}

// A send that settles before the intent could apply: a delivered send
// stands (a cancel is too late; a snooze schedules a new row at the new
// time, since the caller was told it was recorded), and a failed send with a
// cancel recorded ends cancelled, so a redrive never sends it.
func TestIntentWhenTheSendSettles(t *testing.T) {
	b := setup(t)
	newDue := b.now.Add(time.Hour)
	deliver := func(id int64) {
		if _, err := b.l.SettleDelivered(ctx, heldNow(t, b, id), Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now}); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(id int64) {
		if err := b.l.SettleFailed(ctx, heldNow(t, b, id), "permanent: 400 bad number", nil, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, intent string
		settle       func(int64)
		state        State
		outcome      string
		newRow       bool
	}{
		{"cancel, delivered", "cancel", deliver, StateDelivered, "too_late", false},
		{"snooze, delivered", "reschedule", deliver, StateDelivered, "new_row", true},
		{"cancel, failed", "cancel", fail, StateCancelled, "applied", false},
		{"snooze, failed", "reschedule", fail, StateFailed, "new_row", true},
	} {
		ref := "T-" + strings.ReplaceAll(c.name, ", ", "-")
		id := mustSchedule(t, b, "acme", row("a", ref, b.now))[0].ID
		claimAt(t, b, id, b.now)
		var res ChangeResult
		var err error
		if c.intent == "cancel" {
			res, err = b.l.Cancel(ctx, "acme", "follow_up", ref)
		} else {
			res, err = b.l.Reschedule(ctx, "acme", "follow_up", ref, newDue)
		}
		wantChange(t, c.name, res, err, ChangeResult{InFlight: 1, Intents: 1})
		c.settle(id)

		d := mustGet(t, b, id)
		if d.State != c.state || !d.DueAt.Equal(b.now) {
			t.Errorf("%s: row is %s due %s, want %s due %s", c.name, d.State, d.DueAt, c.state, b.now)
		}
		if in := readIntent(t, b, "acme", id); in.Outcome != c.outcome {
			t.Errorf("%s: intent %+v, want outcome %s", c.name, in, c.outcome)
		}
		rows, err := b.l.Find(ctx, "acme", Filter{RefID: ref})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !c.newRow && len(rows) != 1:
			t.Errorf("%s: %d rows for the subject, want the one", c.name, len(rows))
		case c.newRow && (len(rows) != 2 || rows[0].ID == id || rows[0].State != StatePending ||
			!rows[0].DueAt.Equal(newDue) || rows[0].Recipient != "a" || string(rows[0].Payload) != string(rows[1].Payload)):
			t.Errorf("%s: rows %+v, want a new pending row for a at %s with the same payload", c.name, rows, newDue)
		}
		if c.state == StateCancelled {
			if !strings.Contains(d.LastError, "400 bad number") {
				t.Errorf("%s: last_error %q lost the failure", c.name, d.LastError)
			}
			if r, err := b.l.Redrive(ctx, "acme", id); err != nil || r[0].Reopened {
				t.Errorf("%s: redrive %+v (%v), want the cancelled row left alone", c.name, r, err)
			}
		}
	}
}

// The sweep that takes back a row whose claim ran out applies the intent
// too: a snoozed row is leased for its new due time under a new generation
// (the sweep publishes it for then), a cancelled one is settled.
func TestSweepTakingBackALostClaimAppliesTheIntent(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "SNOOZE", b.now), row("a", "CANCEL", b.now))
	snoozed, cancelled := s[0].ID, s[1].ID
	claimAt(t, b, snoozed, b.now)
	claimAt(t, b, cancelled, b.now)
	newDue := b.now.Add(10 * time.Minute)
	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "SNOOZE", newDue)
	wantChange(t, "snooze", res, err, ChangeResult{InFlight: 1, Intents: 1})
	res, err = b.l.Cancel(ctx, "acme", "follow_up", "CANCEL")
	wantChange(t, "cancel", res, err, ChangeResult{InFlight: 1, Intents: 1})

	b.advance(2 * time.Minute)
	l := leaseOne(t, b, snoozed)
	if !l.DueAt.Equal(newDue) || l.QueueGeneration != 1 {
		t.Errorf("sweep took back the snoozed row as %+v, want due %s, generation 1", l, newDue)
	}
	if d := mustGet(t, b, snoozed); d.State != StateLeased || !d.DueAt.Equal(newDue) {
		t.Errorf("snoozed row is %s due %s, want leased due %s", d.State, d.DueAt, newDue)
	}
	if d := mustGet(t, b, cancelled); d.State != StateCancelled {
		t.Errorf("cancelled row is %s after the sweep took it back, want cancelled", d.State)
	}
}

// A snooze is refused as a conflict when a row in flight would land on a
// due time its recipient already has a row for, and nothing changes. A row
// scheduled there after the snooze was recorded takes its place instead:
// the release settles the row in flight cancelled rather than fail.
func TestRescheduleInFlightClash(t *testing.T) {
	b := setup(t)
	newDue := b.now.Add(time.Hour)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("a", "T-1", newDue), row("b", "T-1", b.now.Add(time.Minute)),
		row("a", "T-2", b.now))
	inFlight, open, late := s[0].ID, s[2].ID, s[3].ID
	claimAt(t, b, inFlight, b.now)
	claimAt(t, b, late, b.now)
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", newDue); !errors.Is(err, ErrConflict) {
		t.Fatalf("snooze onto a due time the recipient has: %v, want ErrConflict", err)
	}
	if in := readIntent(t, b, "acme", inFlight); in.Intent != "" {
		t.Errorf("the refused snooze left intent %+v", in)
	}
	if d := mustGet(t, b, open); !d.DueAt.Equal(b.now.Add(time.Minute)) || d.QueueGeneration != 0 {
		t.Errorf("the refused snooze moved the open row: due %s generation %d", d.DueAt, d.QueueGeneration)
	}

	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-2", newDue)
	wantChange(t, "snooze", res, err, ChangeResult{InFlight: 1, Intents: 1})
	there := mustSchedule(t, b, "acme", row("a", "T-2", newDue))[0].ID
	handBack(t, b, late)
	if d := mustGet(t, b, late); d.State != StateCancelled || !d.DueAt.Equal(b.now) {
		t.Errorf("row in flight after the release: %s due %s, want cancelled at its own due time", d.State, d.DueAt)
	}
	if in := readIntent(t, b, "acme", late); in.Outcome != "new_row" {
		t.Errorf("intent %+v, want outcome new_row", in)
	}
	if d := mustGet(t, b, there); d.State != StatePending || !d.DueAt.Equal(newDue) {
		t.Errorf("the row scheduled at the new time is %s due %s, want pending at %s", d.State, d.DueAt, newDue)
	}
}

// The later word wins on a row in flight as on an open one: a cancel
// replaces a snooze still waiting, and a snooze does not replace a cancel
// (the cancel came first; a cancelled open row is not moved either).
func TestLaterWordOnARowInFlight(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("a", "T-2", b.now))
	claimAt(t, b, s[0].ID, b.now)
	claimAt(t, b, s[1].ID, b.now)
	newDue := b.now.Add(time.Hour)

	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", newDue)
	wantChange(t, "snooze", res, err, ChangeResult{InFlight: 1, Intents: 1})
	res, err = b.l.Cancel(ctx, "acme", "follow_up", "T-1")
	wantChange(t, "cancel after the snooze", res, err, ChangeResult{InFlight: 1, Intents: 1})

	res, err = b.l.Cancel(ctx, "acme", "follow_up", "T-2")
	wantChange(t, "cancel", res, err, ChangeResult{InFlight: 1, Intents: 1})
	res, err = b.l.Reschedule(ctx, "acme", "follow_up", "T-2", newDue)
	wantChange(t, "snooze after the cancel", res, err, ChangeResult{InFlight: 1})

	for _, r := range s {
		handBack(t, b, r.ID)
		if d := mustGet(t, b, r.ID); d.State != StateCancelled || !d.DueAt.Equal(b.now) {
			t.Errorf("row %d after the release: %s due %s, want cancelled at %s", r.ID, d.State, d.DueAt, b.now)
		}
	}
}

// heldNow is the hold of the claim that last took row id of acme: the
// token its worker would write with.
func heldNow(t *testing.T, b *bundle, id int64) Hold {
	t.Helper()
	n, err := b.l.Get(ctx, "acme", id)
	if err != nil {
		t.Fatalf("row %d: %v", id, err)
	}
	return Hold{Tenant: "acme", ID: id, Seq: n.ClaimSeq}
}
