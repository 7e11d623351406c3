package ledger

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func payloadText(t *testing.T, d Detail) string {
	t.Helper()
	var p struct{ Text string }
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p.Text
}

// An open row takes an update at once: a new payload, and a new due time
// that moves it as a reschedule does (its expiry keeps its distance, a new
// queue generation); by id or by its schedule key. The answer is certain.
func TestUpdateOpenRow(t *testing.T) {
	b := setup(t)
	r := row("a", "T-1", b.now.Add(time.Hour))
	exp := b.now.Add(2 * time.Hour)
	r.ExpiresAt = &exp
	id := mustSchedule(t, b, "acme", r)[0].ID

	res, err := b.l.Update(ctx, "acme", id, Change{Payload: textPayload("changed")})
	if err != nil || res != (UpdateResult{ID: id, State: StatePending, Changed: true, Certain: true}) {
		t.Fatalf("update of the payload: %+v, %v", res, err)
	}
	if d := mustGet(t, b, id); payloadText(t, d) != "changed" || !d.DueAt.Equal(b.now.Add(time.Hour)) {
		t.Fatalf("after the update: payload %s due %s", d.Payload, d.DueAt)
	}

	later := b.now.Add(3 * time.Hour)
	res, err = b.l.UpdateByKey(ctx, "acme", Key{Recipient: "a", Kind: "follow_up", RefID: "T-1",
		DueAt: b.now.Add(time.Hour)}, Change{DueAt: later})
	if err != nil || !res.Certain || res.ID != id {
		t.Fatalf("update of the due time by key: %+v, %v", res, err)
	}
	d := mustGet(t, b, id)
	if !d.DueAt.Equal(later) || d.ExpiresAt == nil || !d.ExpiresAt.Equal(later.Add(time.Hour)) ||
		d.QueueGeneration != 1 || payloadText(t, d) != "changed" {
		t.Fatalf("after the move: due %s expires %v generation %d payload %s", d.DueAt, d.ExpiresAt,
			d.QueueGeneration, d.Payload)
	}

	// A local due time is read in the row's zone unless the change names one.
	res, err = b.l.Update(ctx, "acme", id, Change{Local: &Local{Due: "2027-03-28T02:30"}, TimeZone: "Europe/Berlin"})
	if err != nil || !res.Certain {
		t.Fatalf("update to a local time: %+v, %v", res, err)
	}
	if d := mustGet(t, b, id); d.DueAt.Format(time.RFC3339) != "2027-03-28T01:30:00Z" ||
		d.DueLocal != "2027-03-28T02:30:00" || d.TimeZone != "Europe/Berlin" {
		t.Fatalf("after the local move: due %s local %q zone %q", d.DueAt, d.DueLocal, d.TimeZone)
	}
}

// What cannot be updated is refused with a reason: a settled row, a row
// that is not there, a payload the channel refuses, a move onto another
// row's key, an expiry before the due time.
func TestUpdateRefusals(t *testing.T) {
	b := setup(t)
	ids := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("a", "T-1", b.now.Add(time.Hour)))
	var settled *ErrSettled
	c := claimAt(t, b, ids[0].ID, b.now)
	if _, err := b.l.SettleDelivered(ctx, Hold{Tenant: "acme", ID: ids[0].ID, Seq: c.Row.ClaimSeq},
		Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.Update(ctx, "acme", ids[0].ID, Change{Payload: textPayload("x")}); !errors.As(err, &settled) ||
		settled.State != StateDelivered {
		t.Errorf("update of a delivered row: %v, want ErrSettled delivered", err)
	}
	if _, err := b.l.Update(ctx, "globex", ids[1].ID, Change{Payload: textPayload("x")}); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's row: %v, want ErrNotFound", err)
	}
	var v *ValidationError
	if _, err := b.l.Update(ctx, "acme", ids[1].ID, Change{Payload: json.RawMessage(`{"subject":"s"}`)}); !errors.As(err, &v) ||
		v.Fields[0].Field != "payload.text" {
		t.Errorf("a payload sms refuses: %v, want payload.text named", err)
	}
	if _, err := b.l.Update(ctx, "acme", ids[1].ID, Change{DueAt: b.now}); !errors.Is(err, ErrConflict) {
		t.Errorf("a move onto the delivered row's key: %v, want ErrConflict", err)
	}
	before := b.now.Add(30 * time.Minute)
	if _, err := b.l.Update(ctx, "acme", ids[1].ID, Change{ExpiresAt: &before}); !errors.As(err, &v) ||
		v.Fields[0].Field != "expires_at" {
		t.Errorf("an expiry before the due time: %v, want expires_at named", err)
	}
	if _, err := b.l.Update(ctx, "acme", ids[1].ID, Change{}); !errors.As(err, &v) {
		t.Errorf("an empty change: %v, want a ValidationError", err)
	}
}

// A worker's claim it has not started sending under is taken back: the
// worker's check before the send finds it gone, so the old content is
// never sent, and the row is queued again for the sweep to republish.
func TestUpdateTakesBackARevocableClaim(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute, Revocable: true})
	if err != nil || c.Outcome != ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	res, err := b.l.Update(ctx, "acme", id, Change{Payload: textPayload("changed")})
	if err != nil || !res.Certain || res.InFlight || res.State != StateQueued {
		t.Fatalf("update of a revocable claim: %+v, %v; want certain, queued", res, err)
	}
	errs, err := b.l.StartSends(ctx, []Hold{{Tenant: "acme", ID: id, Seq: c.Row.ClaimSeq}}, time.Minute, time.Minute)
	if err != nil || len(errs) != 1 || !errors.Is(errs[0], ErrClaimLost) {
		t.Fatalf("the worker's check before the send: %v %v, want ErrClaimLost", errs, err)
	}
	again := claimAt(t, b, id, b.now)
	var p struct{ Text string }
	if json.Unmarshal(again.Row.Payload, &p); p.Text != "changed" {
		t.Errorf("the next claim sends %s, want the new payload", again.Row.Payload)
	}
}

// A row whose send has started takes the update as an intent: applied when
// the send is handed back, too late when it delivers. The answer says the
// change is not certain.
func TestUpdateInFlightIsAnIntent(t *testing.T) {
	b := setup(t)
	ids := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-1", b.now))
	for _, s := range ids {
		claimAt(t, b, s.ID, b.now)
	}
	later := b.now.Add(time.Hour)
	for _, s := range ids {
		res, err := b.l.Update(ctx, "acme", s.ID, Change{Payload: textPayload("changed"), DueAt: later})
		if err != nil || res != (UpdateResult{ID: s.ID, State: StateSending, InFlight: true, Intent: true}) {
			t.Fatalf("update in flight: %+v, %v; want an intent, not certain", res, err)
		}
	}
	handBack(t, b, ids[0].ID)
	d := mustGet(t, b, ids[0].ID)
	if d.State != StatePending || !d.DueAt.Equal(later) || payloadText(t, d) != "changed" || d.QueueGeneration != 1 {
		t.Errorf("handed back: %s due %s payload %s generation %d; want pending at the new time with the new payload",
			d.State, d.DueAt, d.Payload, d.QueueGeneration)
	}
	if in := readIntent(t, b, "acme", ids[0].ID); in.Intent != "update" || in.Outcome != "applied" {
		t.Errorf("intent %+v, want an update applied", in)
	}
	if _, err := b.l.SettleDelivered(ctx, heldNow(t, b, ids[1].ID), Attempt{Provider: "p", StartedAt: b.now,
		FinishedAt: b.now}); err != nil {
		t.Fatal(err)
	}
	d = mustGet(t, b, ids[1].ID)
	if d.State != StateDelivered || !d.DueAt.Equal(b.now) || payloadText(t, d) != "hello" {
		t.Errorf("delivered: %s due %s payload %s; want the send as it went", d.State, d.DueAt, d.Payload)
	}
	if in := readIntent(t, b, "acme", ids[1].ID); in.Outcome != "too_late" {
		t.Errorf("intent %+v, want too_late", in)
	}
	// A cancel waiting on a send wins over a later update.
	id := mustSchedule(t, b, "acme", row("c", "T-2", b.now))[0].ID
	claimAt(t, b, id, b.now)
	if _, err := b.l.Cancel(ctx, "acme", "follow_up", "T-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.Update(ctx, "acme", id, Change{Payload: textPayload("x")}); !errors.Is(err, ErrCancelWaiting) {
		t.Errorf("update after a cancel in flight: %v, want ErrCancelWaiting", err)
	}
}
