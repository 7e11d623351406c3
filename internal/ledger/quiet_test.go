package ledger

import (
	"database/sql"
	"errors"
	"testing"
	"time"
)

// weekdays is a send window on weekdays, 08:00 to 20:00. The tests' clock
// starts on Sunday 1 March 2026, 12:00 UTC: quiet.
var weekdays = QuietHours{Scope: "tenant", Windows: []string{"mon-fri 08:00-20:00"}}

func setQuiet(t *testing.T, b *bundle, q QuietHours) HoldResult {
	t.Helper()
	res, err := b.l.SetQuietHours(ctx, "acme", q)
	if err != nil {
		t.Fatalf("set quiet hours %+v: %v", q, err)
	}
	return res
}

func leasedIDs(t *testing.T, b *bundle) map[int64]bool {
	t.Helper()
	got, err := b.l.Lease(ctx, leaseAll)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	for _, r := range got {
		ids[r.ID] = true
	}
	return ids
}

// A row due in quiet hours is sent at the window's opening, not before: its
// due_at is the opening, which is all the sweep reads; it records the time
// asked and says it is held. An urgent row is not held, and a row whose
// expiry falls inside the hold expires unsent. A replay finds the held row.
func TestQuietHoursHoldUntilTheOpening(t *testing.T) {
	b := setup(t)
	setQuiet(t, b, weekdays)
	urgent := row("b", "T-1", b.now)
	urgent.Urgent = true
	short := row("c", "T-1", b.now)
	exp := b.now.Add(time.Hour)
	short.ExpiresAt = &exp
	out := mustSchedule(t, b, "acme", row("a", "T-1", b.now), urgent, short)
	opening := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

	d := mustGet(t, b, out[0].ID)
	if !d.DueAt.Equal(opening) || d.HeldFrom == nil || !d.HeldFrom.Equal(b.now) ||
		d.Hold != "held for quiet hours until 2026-03-02T08:00:00Z" {
		t.Fatalf("held row: due %s held_from %v hold %q; want due at Monday 08:00, asked for now", d.DueAt, d.HeldFrom, d.Hold)
	}
	if again := mustSchedule(t, b, "acme", row("a", "T-1", b.now)); again[0].Created || again[0].ID != out[0].ID {
		t.Errorf("replay of a held row: %+v, want the same row", again[0])
	}
	if out[2].State != StateExpired {
		t.Errorf("a row expiring inside its hold answered %s, want expired", out[2].State)
	}
	if d := mustGet(t, b, out[2].ID); d.State != StateExpired || d.LastError != expiredInHold {
		t.Errorf("a row expiring inside its hold: %s %q", d.State, d.LastError)
	}
	if got := leasedIDs(t, b); len(got) != 1 || !got[out[1].ID] {
		t.Fatalf("leased %v now, want only the urgent row %d", got, out[1].ID)
	}
	b.advance(opening.Sub(b.now) - time.Second)
	// The urgent row's lease ran out meanwhile, so the sweep takes it again.
	if got := leasedIDs(t, b); got[out[0].ID] {
		t.Fatalf("leased %v a second before the opening, want not the held row", got)
	}
	b.advance(time.Second)
	if got := leasedIDs(t, b); !got[out[0].ID] {
		t.Fatalf("leased %v at the opening, want the held row %d", got, out[0].ID)
	}
}

// The recipient's window wins over the kind's, the kind's over the
// tenant's, each read on the recipient's clock: the row's zone, else its
// contact's, else the scope's.
func TestQuietHoursScopesAndZones(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, time_zone)
			VALUES ('acme', 'syd', 'sms', '+61255500', 'Australia/Sydney')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	setQuiet(t, b, weekdays)
	setQuiet(t, b, QuietHours{Scope: "kind:digest", Windows: []string{"daily 06:00-07:00"}})
	setQuiet(t, b, QuietHours{Scope: "recipient:night", Windows: []string{"daily 22:00-06:00"}, TimeZone: "America/New_York"})
	digest := row("a", "T-2", b.now)
	digest.Kind = "digest"
	berlin := row("ber", "T-3", b.now)
	berlin.TimeZone = "Europe/Berlin"
	out := mustSchedule(t, b, "acme", digest, row("night", "T-1", b.now), row("syd", "T-1", b.now), berlin)
	for i, want := range []string{
		"2026-03-02T06:00:00Z", // the kind's window, in UTC
		"2026-03-02T03:00:00Z", // 22:00 EST, the recipient's own window
		"2026-03-01T21:00:00Z", // Monday 08:00 AEDT, from the contact's zone
		"2026-03-02T07:00:00Z", // Monday 08:00 CET
	} {
		if d := mustGet(t, b, out[i].ID); d.DueAt.Format(time.RFC3339) != want {
			t.Errorf("row %d (%s): due %s, want %s", i, d.Recipient, d.DueAt.Format(time.RFC3339), want)
		}
	}
}

// A change of the windows moves the pending rows: held when a window is
// set, released back to the time asked when it is removed; a move by
// reschedule takes the windows in force.
func TestQuietHoursChangeMovesPendingRows(t *testing.T) {
	b := setup(t)
	later := b.now.Add(2 * time.Hour)
	out := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", later))
	if res := setQuiet(t, b, weekdays); res != (HoldResult{Held: 2}) {
		t.Fatalf("set: %+v, want both rows held", res)
	}
	// Both rows of one recipient and subject would land on Monday 08:00:
	// one send, the row asked for first.
	dup := mustSchedule(t, b, "acme", row("a", "T-1", later))
	if dup[0].Created {
		t.Errorf("a second row held onto the first's opening was created: %+v", dup[0])
	}
	if res := setQuiet(t, b, QuietHours{Scope: "tenant"}); res != (HoldResult{Released: 2}) {
		t.Fatalf("remove: %+v, want both rows released", res)
	}
	for i, want := range []time.Time{b.now, later} {
		if d := mustGet(t, b, out[i].ID); !d.DueAt.Equal(want) || d.HeldFrom != nil || d.Hold != "" {
			t.Errorf("row %d released: due %s held_from %v", i, d.DueAt, d.HeldFrom)
		}
	}
	setQuiet(t, b, weekdays)
	tuesday := time.Date(2026, 3, 3, 21, 0, 0, 0, time.UTC)
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-2", tuesday); err != nil {
		t.Fatal(err)
	}
	if d := mustGet(t, b, out[1].ID); d.DueAt.Format(time.RFC3339) != "2026-03-04T08:00:00Z" || d.HeldFrom == nil ||
		!d.HeldFrom.Equal(tuesday) {
		t.Errorf("rescheduled into quiet hours: due %s held_from %v, want Wednesday 08:00 from Tuesday 21:00", d.DueAt, d.HeldFrom)
	}
	var v *ValidationError
	if _, err := b.l.SetQuietHours(ctx, "acme", QuietHours{Scope: "team", Windows: []string{"weekdays 9-5"}}); !errors.As(err, &v) ||
		len(v.Fields) != 2 || v.Fields[0].Field != "scope" || v.Fields[1].Field != "windows[0]" {
		t.Errorf("a bad scope and window: %v", err)
	}
}
