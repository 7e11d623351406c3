package ledger

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// revocable is a worker's claim: revocable until its send starts.
var revocable = ClaimParams{LeaseFor: time.Minute, Revocable: true}

// startSend makes h's check before the send and returns its answer.
func startSend(t *testing.T, b *bundle, h Hold) error {
	t.Helper()
	errs, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, time.Minute)
	if err != nil {
		t.Fatalf("start send of row %d: %v", h.ID, err)
	}
	return errs[0]
}

// A cancel or reschedule that lands on a revocable claim, before its worker
// starts the send, takes the row back as it would an open row: the answer is
// certain (changed, nothing in flight), and the worker's check before the
// send finds the claim gone, so nothing is sent. The claim stamped no
// claimed_at, since it sent nothing.
func TestChangeRevokesAClaimWhoseSendHasNotStarted(t *testing.T) {
	b := setup(t)
	later := b.now.Add(time.Hour)
	for _, change := range []string{"cancel", "reschedule"} {
		ref := "T-" + change
		id := mustSchedule(t, b, "acme", row("a", ref, b.now))[0].ID
		p := revocable
		p.DueAt = b.now
		h := mustClaim(t, b, "acme", id, p)
		if d := mustGet(t, b, id); d.ClaimedAt != nil {
			t.Errorf("%s: a revocable claim stamped claimed_at %v, want it left to the start of the send", change, d.ClaimedAt)
		}
		var res ChangeResult
		var err error
		if change == "cancel" {
			res, err = b.l.Cancel(ctx, "acme", "follow_up", ref)
		} else {
			res, err = b.l.Reschedule(ctx, "acme", "follow_up", ref, later)
		}
		wantChange(t, change+" before the send", res, err, ChangeResult{Changed: 1})
		if err := startSend(t, b, h); !errors.Is(err, ErrClaimLost) {
			t.Errorf("%s: the check before the send answered %v, want ErrClaimLost", change, err)
		}
		d := mustGet(t, b, id)
		switch {
		case change == "cancel" && (d.State != StateCancelled || d.ClaimedAt != nil):
			t.Errorf("row after the cancel: %s claimed %v, want cancelled, never marked", d.State, d.ClaimedAt)
		case change == "reschedule" && (d.State != StatePending || !d.DueAt.Equal(later) || d.ClaimedAt != nil):
			t.Errorf("row after the snooze: %s due %s claimed %v, want pending at %s, never marked",
				d.State, d.DueAt, d.ClaimedAt, later)
		}
		if in := readIntent(t, b, "acme", id); in.Intent != "" {
			t.Errorf("%s: intent %+v, want none: the change was applied, not left waiting", change, in)
		}
	}
}

// Once the worker's check before the send has passed, the send may be on the
// wire: a change then waits on it as an intent and is answered in flight, and
// the check stamped claimed_at, the mark a later send is flagged by.
func TestChangeAfterTheSendStartedIsAnIntent(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	p := revocable
	p.DueAt = b.now
	h := mustClaim(t, b, "acme", id, p)
	b.advance(time.Second)
	if err := startSend(t, b, h); err != nil {
		t.Fatalf("the check before the send: %v, want held", err)
	}
	if d := mustGet(t, b, id); d.ClaimedAt == nil || !d.ClaimedAt.Equal(b.now) {
		t.Errorf("claimed_at %v after the send started, want %s", d.ClaimedAt, b.now)
	}
	res, err := b.l.Cancel(ctx, "acme", "follow_up", "T-1")
	wantChange(t, "cancel after the send started", res, err, ChangeResult{InFlight: 1, Intents: 1})
	if d := mustGet(t, b, id); d.State != StateSending {
		t.Errorf("row is %s, want still sending", d.State)
	}
}

// The check before the send and a cancel race for the row's lock; whichever
// comes first decides, and the answer always says which: changed when the
// cancel won (and the check then refuses), in flight when the send started
// first (and the check passed). Never both, never neither.
func TestCancelRacingTheStartOfTheSendAnswersHowItEnds(t *testing.T) {
	b := setup(t)
	const n = 20
	for i := range n {
		ref := fmt.Sprintf("R-%d", i)
		id := mustSchedule(t, b, "acme", row("a", ref, b.now))[0].ID
		p := revocable
		p.DueAt = b.now
		h := mustClaim(t, b, "acme", id, p)
		var wg sync.WaitGroup
		var res ChangeResult
		var cancelErr, startErr error
		wg.Go(func() { res, cancelErr = b.l.Cancel(ctx, "acme", "follow_up", ref) })
		wg.Go(func() {
			errs, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, time.Minute)
			if startErr = err; err == nil {
				startErr = errs[0]
			}
		})
		wg.Wait()
		if cancelErr != nil || (startErr != nil && !errors.Is(startErr, ErrClaimLost)) {
			t.Fatalf("race %d: cancel %v, start %v", i, cancelErr, startErr)
		}
		started := startErr == nil
		switch {
		case started && res != (ChangeResult{InFlight: 1, Intents: 1}):
			t.Errorf("race %d: the send started, but the cancel answered %+v, want in flight", i, res)
		case !started && res != (ChangeResult{Changed: 1}):
			t.Errorf("race %d: the cancel revoked the claim, but answered %+v, want changed", i, res)
		}
	}
}

// A row re-opened after a claim that lapsed mid-send keeps the mark that the
// provider may have it: the send at the new time is flagged a possible
// duplicate, whether the reschedule is the API's or the materialiser's move
// (issue 27: both cleared claimed_at, so the resend went unrecorded, while
// the intent path kept it).
func TestRescheduleAfterALapsedClaimKeepsThePossibleDuplicateMark(t *testing.T) {
	b := setup(t)
	for _, how := range []string{"reschedule", "materialiser"} {
		ref := "T-" + how
		due := b.now
		var id int64
		if how == "materialiser" {
			out, err := b.l.ScheduleMaterialised(ctx, "acme", []NewNotification{row("a", ref, due)})
			if err != nil {
				t.Fatal(err)
			}
			id = out[0].ID
		} else {
			id = mustSchedule(t, b, "acme", row("a", ref, due))[0].ID
		}
		// The worker claims the row and dies mid-send: its lease runs out.
		mustClaim(t, b, "acme", id, ClaimParams{DueAt: due, LeaseFor: time.Minute})
		b.advance(2 * time.Minute)
		later := b.now.Add(time.Hour)
		if how == "reschedule" {
			res, err := b.l.Reschedule(ctx, "acme", "follow_up", ref, later)
			wantChange(t, "reschedule after the lapse", res, err, ChangeResult{Changed: 1})
		} else {
			res, err := b.l.ChangeMaterialised(ctx, "acme", []MaterialisedChange{{ID: id, DueAt: later, ExpiresAt: later.Add(time.Hour)}})
			if err != nil || res.Rescheduled != 1 {
				t.Fatalf("the materialiser's move after the lapse: %+v %v", res, err)
			}
		}
		b.advance(time.Hour)
		c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: later, LeaseFor: time.Minute})
		if err != nil || c.Outcome != ClaimSend || !c.PossibleDuplicate {
			t.Errorf("%s: the claim at the new time: %v dup=%v err=%v, want send flagged as a possible duplicate",
				how, c.Outcome, c.PossibleDuplicate, err)
		}
	}
}
