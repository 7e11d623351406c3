package ledger

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/migrate"
)

// The tests' clock starts on Sunday 1 March 2026, 12:00 UTC. Tuesday 21:00
// is outside the weekday window, whose next opening is Wednesday 08:00.
var (
	tuesdayNight      = time.Date(2026, 3, 3, 21, 0, 0, 0, time.UTC)
	wednesdayMorning  = time.Date(2026, 3, 4, 8, 0, 0, 0, time.UTC)
	wednesdayMidnight = time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
)

// inFlight schedules one row of ref due now for recipient and has a worker
// start its send, before any window is set, so the row is sending as the
// change lands.
func inFlight(t *testing.T, b *bundle, recipient, ref string, urgent bool) int64 {
	t.Helper()
	r := row(recipient, ref, b.now)
	r.Urgent = urgent
	id := mustSchedule(t, b, "acme", r)[0].ID
	claimAt(t, b, id, b.now)
	return id
}

// A reschedule or update recorded on a row in flight moves the row, once
// the send is handed back, to a time the quiet hours in force apply to, as
// they do for a pending row: held to the window's opening (held_from the
// time asked), expired unsent when its expiry falls inside the hold, and
// not held when the row is urgent.
func TestQuietHoursApplyToAnIntentThatMovesTheRow(t *testing.T) {
	b := setup(t)
	snoozed := inFlight(t, b, "a", "SNOOZE", false)
	updated := inFlight(t, b, "b", "UPDATE", false)
	short := inFlight(t, b, "c", "SHORT", false)
	urgent := inFlight(t, b, "d", "URGENT", true)
	setQuiet(t, b, weekdays)

	for _, ref := range []string{"SNOOZE", "URGENT"} {
		res, err := b.l.Reschedule(ctx, "acme", "follow_up", ref, tuesdayNight)
		wantChange(t, "snooze of "+ref+" in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	}
	if res, err := b.l.Update(ctx, "acme", updated, Change{DueAt: tuesdayNight, Payload: textPayload("new")}); err != nil || !res.Intent {
		t.Fatalf("update in flight: %+v, %v", res, err)
	}
	expires := wednesdayMidnight
	if res, err := b.l.Update(ctx, "acme", short, Change{DueAt: tuesdayNight, ExpiresAt: &expires}); err != nil || !res.Intent {
		t.Fatalf("update in flight: %+v, %v", res, err)
	}
	for _, id := range []int64{snoozed, updated, short, urgent} {
		handBack(t, b, id)
	}

	for _, id := range []int64{snoozed, updated} {
		d := mustGet(t, b, id)
		if d.State != StatePending || !d.DueAt.Equal(wednesdayMorning) || d.HeldFrom == nil || !d.HeldFrom.Equal(tuesdayNight) ||
			d.Hold != "held for quiet hours until 2026-03-04T08:00:00Z" {
			t.Errorf("row %d (%s) handed back: %s due %s held_from %v hold %q; want pending, held to Wednesday 08:00 "+
				"from Tuesday 21:00", id, d.RefID, d.State, d.DueAt, d.HeldFrom, d.Hold)
		}
	}
	if d := mustGet(t, b, updated); payloadText(t, d) != "new" {
		t.Errorf("the update's payload was lost: %s", d.Payload)
	}
	if d := mustGet(t, b, short); d.State != StateExpired || d.LastError != expiredInHold || d.SettledAt == nil {
		t.Errorf("a row whose new expiry falls inside its hold: %s %q, want expired unsent", d.State, d.LastError)
	}
	if d := mustGet(t, b, urgent); d.State != StatePending || !d.DueAt.Equal(tuesdayNight) || d.HeldFrom != nil {
		t.Errorf("the urgent row: %s due %s held_from %v, want pending at Tuesday 21:00, not held", d.State, d.DueAt, d.HeldFrom)
	}

	// Nothing is sent before the opening: a second before it, the sweep
	// leases only the urgent row.
	b.advance(wednesdayMorning.Sub(b.now) - time.Second)
	if got := leasedIDs(t, b); got[snoozed] || got[updated] || !got[urgent] {
		t.Fatalf("leased %v a second before the opening, want the urgent row %d only", got, urgent)
	}
	b.advance(time.Second)
	if got := leasedIDs(t, b); !got[snoozed] || !got[updated] {
		t.Fatalf("leased %v at the opening, want rows %d and %d", got, snoozed, updated)
	}
}

// A reschedule of a send that then delivers schedules a new row at the new
// time, and that row takes the quiet hours too.
func TestQuietHoursHoldTheNewRowOfADeliveredSnooze(t *testing.T) {
	b := setup(t)
	id := inFlight(t, b, "a", "T-1", false)
	setQuiet(t, b, weekdays)
	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", tuesdayNight)
	wantChange(t, "snooze in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	if _, err := b.l.SettleDelivered(ctx, heldNow(t, b, id), Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now}); err != nil {
		t.Fatal(err)
	}
	rows, err := b.l.Find(ctx, "acme", Filter{RefID: "T-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].ID == id || rows[0].State != StatePending || !rows[0].DueAt.Equal(wednesdayMorning) ||
		rows[0].HeldFrom == nil || !rows[0].HeldFrom.Equal(tuesdayNight) {
		t.Fatalf("rows %+v, want a new pending row held to Wednesday 08:00 from Tuesday 21:00", rows)
	}
}

// Windows set or removed while an intent waits on a send apply to it as to
// a pending row: removing them releases the intent back to the time asked.
func TestQuietHoursChangeMovesAWaitingIntent(t *testing.T) {
	b := setup(t)
	id := inFlight(t, b, "a", "T-1", false)
	setQuiet(t, b, weekdays)
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", tuesdayNight); err != nil {
		t.Fatal(err)
	}
	if in := readIntent(t, b, "acme", id); in.DueAt == nil || !in.DueAt.Equal(wednesdayMorning) {
		t.Fatalf("intent %+v, want it held to Wednesday 08:00", in)
	}
	if res := setQuiet(t, b, QuietHours{Scope: "tenant"}); res != (HoldResult{Released: 1}) {
		t.Errorf("remove the windows: %+v, want the intent released", res)
	}
	handBack(t, b, id)
	if d := mustGet(t, b, id); !d.DueAt.Equal(tuesdayNight) || d.HeldFrom != nil {
		t.Errorf("handed back: due %s held_from %v, want Tuesday 21:00, not held", d.DueAt, d.HeldFrom)
	}
}

// An update in flight that gives a local time in a zone the row did not
// have applies with that zone: before, the intent carried the local time
// but not the zone, and applying it broke the row's rule that a local time
// has a zone, which failed the worker's release.
func TestUpdateInFlightCarriesItsZone(t *testing.T) {
	b := setup(t)
	id := inFlight(t, b, "a", "T-1", false)
	if _, err := b.l.Update(ctx, "acme", id, Change{Local: &Local{Due: "2026-03-03T09:00"}, TimeZone: "Europe/Berlin"}); err != nil {
		t.Fatal(err)
	}
	handBack(t, b, id)
	if d := mustGet(t, b, id); d.DueAt.Format(time.RFC3339) != "2026-03-03T08:00:00Z" || d.TimeZone != "Europe/Berlin" ||
		d.DueLocal != "2026-03-03T09:00:00" {
		t.Errorf("handed back: due %s zone %q local %q, want 09:00 in Berlin", d.DueAt, d.TimeZone, d.DueLocal)
	}
}

// Rolling back the migration that brought held intents keeps the ledger
// valid: a move waiting on a send whose expiry falls inside its hold goes
// back to the time it asked for (where the previous release, which knows
// no holds, puts it), so the previous check validates, and the send's
// release still applies it.
func TestRollingBackHeldIntents(t *testing.T) {
	b := setup(t)
	id := inFlight(t, b, "a", "T-1", false)
	setQuiet(t, b, weekdays)
	expires := wednesdayMidnight
	if _, err := b.l.Update(ctx, "acme", id, Change{DueAt: tuesdayNight, ExpiresAt: &expires}); err != nil {
		t.Fatal(err)
	}
	all, err := migrate.Status(ctx, b.db.Owner)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(m migrate.Migration) bool { return strings.HasSuffix(m.Name, "_quiet_hours_in_flight.sql") })
	if i < 1 {
		t.Fatalf("no quiet_hours_in_flight migration in %+v", all)
	}
	if _, err := migrate.DownTo(ctx, b.db.Owner, all[i-1].Version); err != nil {
		t.Fatalf("roll back: %v", err)
	}
	if in := readIntent(t, b, "acme", id); in.DueAt == nil || !in.DueAt.Equal(tuesdayNight) {
		t.Errorf("the intent after the rollback: %+v, want it back at Tuesday 21:00", in)
	}
	var valid bool
	if err := b.db.Owner.QueryRow(`SELECT convalidated FROM pg_constraint
		WHERE conname = 'owed_notifications_intent_expiry'`).Scan(&valid); err != nil || !valid {
		t.Errorf("the previous check: validated %v (%v), want valid", valid, err)
	}
	if _, err := migrate.Up(ctx, b.db.Owner); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	handBack(t, b, id)
	if d := mustGet(t, b, id); d.State != StatePending || !d.DueAt.Equal(tuesdayNight) {
		t.Errorf("handed back: %s due %s, want pending at Tuesday 21:00", d.State, d.DueAt)
	}
}
