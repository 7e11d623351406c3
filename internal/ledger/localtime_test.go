package ledger

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
)

func localRow(recipient, ref, zone, due string) NewNotification {
	n := row(recipient, ref, time.Time{})
	n.TimeZone = zone
	n.Local = &Local{Due: due}
	return n
}

// A row scheduled as a local time is due at the instant it stands for in
// its zone, and records the zone and the local time asked; a replay finds
// the same row. Berlin's 02:30 on the night the clocks skip it is 03:30
// CEST, the gap's length later.
func TestScheduleLocalTimeResolvesAndRecords(t *testing.T) {
	b := setup(t)
	gap := localRow("+15550001", "T-1", "Europe/Berlin", "2027-03-28T02:30")
	gap.Local.Expires = "2027-03-28T09:00"
	first := mustSchedule(t, b, "acme", gap, localRow("+15550002", "T-1", "America/New_York", "2027-11-07T01:30"))
	again := mustSchedule(t, b, "acme", gap)
	if !first[0].Created || again[0].Created || again[0].ID != first[0].ID {
		t.Fatalf("replay of a local-time row: first %+v, again %+v; want the one row", first[0], again[0])
	}
	for i, want := range []struct{ due, expires, zone, local string }{
		{"2027-03-28T01:30:00Z", "2027-03-28T07:00:00Z", "Europe/Berlin", "2027-03-28T02:30:00"},
		{"2027-11-07T05:30:00Z", "", "America/New_York", "2027-11-07T01:30:00"},
	} {
		d, err := b.l.Get(ctx, "acme", first[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		n := d.Notification
		if got := n.DueAt.Format(time.RFC3339); got != want.due {
			t.Errorf("row %d: due_at %s, want %s", i, got, want.due)
		}
		if want.expires != "" && (n.ExpiresAt == nil || n.ExpiresAt.Format(time.RFC3339) != want.expires) {
			t.Errorf("row %d: expires_at %v, want %s", i, n.ExpiresAt, want.expires)
		}
		if n.TimeZone != want.zone || n.DueLocal != want.local {
			t.Errorf("row %d: time_zone %q due_local %q, want %q and %q", i, n.TimeZone, n.DueLocal, want.zone, want.local)
		}
	}
	// A move by instant leaves the local time asked behind; the zone stays.
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", b.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	d, _ := b.l.Get(ctx, "acme", first[0].ID)
	if d.Notification.DueLocal != "" || d.Notification.TimeZone != "Europe/Berlin" {
		t.Errorf("after a reschedule: due_local %q time_zone %q, want none and Europe/Berlin",
			d.Notification.DueLocal, d.Notification.TimeZone)
	}
}

// A row without a zone of its own takes its recipient's contact's: the
// contact on the row's channel first, else one on another channel. A
// recipient without one is refused naming time_zone, and nothing of the
// batch is written.
func TestScheduleLocalTimeTakesTheContactsZone(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, time_zone) VALUES
			('acme', 'ann', 'sms', '+15550001', 'Australia/Lord_Howe'),
			('acme', 'ann', 'email', 'ann@example.com', 'Europe/Berlin'),
			('acme', 'bob', 'email', 'bob@example.com', 'America/New_York'),
			('acme', 'cat', 'sms', '+15550003', NULL),
			('globex', 'dan', 'sms', '+15550004', 'Europe/Berlin')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	out := mustSchedule(t, b, "acme", localRow("ann", "T-1", "", "2027-10-03T02:15"),
		localRow("bob", "T-1", "", "2027-03-14T02:30"))
	for i, want := range []struct{ due, zone string }{
		{"2027-10-02T15:45:00Z", "Australia/Lord_Howe"},
		{"2027-03-14T07:30:00Z", "America/New_York"},
	} {
		d, err := b.l.Get(ctx, "acme", out[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Notification.DueAt.Format(time.RFC3339); got != want.due || d.Notification.TimeZone != want.zone {
			t.Errorf("row %d: due_at %s in %q, want %s in %s", i, got, d.Notification.TimeZone, want.due, want.zone)
		}
	}
	// cat's contact names no zone; dan's is another tenant's.
	for _, who := range []string{"cat", "dan", "eve"} {
		_, err := b.l.Schedule(ctx, "acme", []NewNotification{localRow("ann", "T-2", "", "2027-01-01T09:00"),
			localRow(who, "T-2", "", "2027-01-01T09:00")})
		var v *ValidationError
		if !errors.As(err, &v) || len(v.Fields) != 1 || v.Fields[0].Index != 1 || v.Fields[0].Field != "time_zone" {
			t.Fatalf("%s without a zone: %v, want notifications[1].time_zone", who, err)
		}
	}
	if rows, _ := b.l.Find(ctx, "acme", Filter{RefID: "T-2"}); len(rows) != 0 {
		t.Errorf("a refused batch wrote %d rows", len(rows))
	}
}

// Every refusal names the field, the value and what is accepted.
func TestScheduleLocalTimeRefusals(t *testing.T) {
	t.Parallel()
	withDue := localRow("ann", "T", "Europe/Berlin", "2027-03-28T09:00")
	withDue.DueAt = time.Date(2027, 3, 28, 8, 0, 0, 0, time.UTC)
	expBefore := localRow("ann", "T", "Europe/Berlin", "2027-03-28T09:00")
	expBefore.Local.Expires = "2027-03-28T08:00"
	rejectGap := localRow("ann", "T", "Europe/Berlin", "2027-03-28T02:30")
	rejectGap.Local.Disambiguation = "reject"
	rejectOverlap := localRow("ann", "T", "Europe/Berlin", "2027-10-31T02:30")
	rejectOverlap.Local.Disambiguation = "reject"
	badDisamb := localRow("ann", "T", "Europe/Berlin", "2027-10-31T02:30")
	badDisamb.Local.Disambiguation = "first"
	zoneOnly := row("ann", "T", time.Date(2027, 3, 28, 8, 0, 0, 0, time.UTC))
	zoneOnly.TimeZone = "Mars/Olympus_Mons"
	for _, tc := range []struct {
		name  string
		row   NewNotification
		field string
		says  []string
	}{
		{"bad zone", localRow("ann", "T", "Europe/Berlln", "2027-03-28T09:00"), "time_zone",
			[]string{`"Europe/Berlln"`, "IANA"}},
		{"zone with an instant", zoneOnly, "time_zone", []string{"Mars/Olympus_Mons"}},
		{"offset", localRow("ann", "T", "Europe/Berlin", "2027-03-28T09:00+01:00"), "due_local",
			[]string{`"2027-03-28T09:00+01:00"`, "offset"}},
		{"not a time", localRow("ann", "T", "Europe/Berlin", "tomorrow 9am"), "due_local",
			[]string{`"tomorrow 9am"`, "like 2027-03-28T09:00"}},
		{"both", withDue, "due_local", []string{"due_at or due_local"}},
		{"expiry first", expBefore, "expires_local", []string{"not after the due time"}},
		{"gap refused", rejectGap, "due_local", []string{"2027-03-28T02:30:00", "does not exist in Europe/Berlin",
			"UTC+01:00 to UTC+02:00", "compatible, earlier or later"}},
		{"overlap refused", rejectOverlap, "due_local", []string{"is repeated in Europe/Berlin",
			"2027-10-31T00:30:00Z and 2027-10-31T01:30:00Z"}},
		{"disambiguation", badDisamb, "disambiguation", []string{`"first"`, "compatible (the default), earlier, later, reject"}},
	} {
		err := Validate("acme", []NewNotification{tc.row})
		var v *ValidationError
		if !errors.As(err, &v) || len(v.Fields) != 1 || v.Fields[0].Field != tc.field {
			t.Errorf("%s: %v, want one error naming %s", tc.name, err, tc.field)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(v.Fields[0].Msg, s) {
				t.Errorf("%s: %q does not say %q", tc.name, v.Fields[0].Msg, s)
			}
		}
	}
}
