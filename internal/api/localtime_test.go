package api

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func localNote(recipient, ref, zone, due string) map[string]any {
	n := note(recipient, ref, time.Time{})
	delete(n, "due_at")
	n["due_local"] = due
	if zone != "" {
		n["time_zone"] = zone
	}
	return n
}

// A row scheduled in the recipient's local time is due at the instant the
// zone gives it, and its detail shows the zone and the local time asked.
func TestScheduleInLocalTime(t *testing.T) {
	b := setup(t)
	n := localNote("+15550001", "T-1", "Europe/Berlin", "2027-03-28T02:30")
	n["expires_local"] = "2027-03-28T09:00"
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(n))
	expect(t, r, http.StatusOK)
	var res scheduleResult
	r.data(t, &res)
	r = b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", res.Notifications[0].ID), b.acme, nil)
	expect(t, r, http.StatusOK)
	var d detailResponse
	r.data(t, &d)
	if d.DueAt.Format(time.RFC3339) != "2027-03-28T01:30:00Z" || d.ExpiresAt == nil ||
		d.ExpiresAt.Format(time.RFC3339) != "2027-03-28T07:00:00Z" || d.TimeZone != "Europe/Berlin" ||
		d.DueLocal != "2027-03-28T02:30:00" {
		t.Errorf("detail due_at %s expires_at %v time_zone %q due_local %q; want 03:30 CEST (01:30Z), 09:00 CEST, "+
			"Europe/Berlin and the 02:30 asked", d.DueAt, d.ExpiresAt, d.TimeZone, d.DueLocal)
	}
}

// Each bad local-time field is a 400 naming the field and the value.
func TestScheduleInLocalTimeRefusals(t *testing.T) {
	b := setup(t)
	reject := localNote("a", "T", "America/New_York", "2027-03-14T02:30")
	reject["disambiguation"] = "reject"
	noZone := localNote("a", "T", "", "2027-03-14T09:30")
	for _, tc := range []struct {
		row   map[string]any
		field string
		value string
	}{
		{localNote("a", "T", "America/NewYork", "2027-03-14T09:30"), "notifications[0].time_zone", "America/NewYork"},
		{localNote("a", "T", "America/New_York", "2027-03-14 09:30"), "notifications[0].due_local", "2027-03-14 09:30"},
		{reject, "notifications[0].due_local", "does not exist in America/New_York"},
		{noZone, "notifications[0].time_zone", "contact"},
	} {
		r := b.do(t, "POST", "/v1/notifications", b.acme, batch(tc.row))
		e := expectField(t, r, http.StatusBadRequest, tc.field)
		if !strings.Contains(e.Message, tc.value) {
			t.Errorf("%s: %q does not say %q", tc.field, e.Message, tc.value)
		}
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Errorf("refused requests wrote %d rows", n)
	}
}

// localEvent is an event due at the local time due for recipients, in
// the event's zone when zone is not empty.
func localEvent(zone, due string, recipients ...map[string]any) map[string]any {
	e := map[string]any{"kind": "shipment", "ref_id": "S-1", "channel": "sms", "payload": map[string]any{"text": "hi"},
		"due_local": due, "recipients": recipients}
	if zone != "" {
		e["time_zone"] = zone
	}
	return e
}

// An event takes the local-time form of a schedule: due_local on each
// recipient's wall clock, in the recipient's own zone, else the event's,
// else the recipient's contact's, with the same disambiguation.
func TestEventInLocalTime(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, time_zone)
			VALUES ('acme', 'syd', 'sms', '+61255500', 'Australia/Sydney')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e := localEvent("Europe/Berlin", "2027-03-28T02:30", map[string]any{"recipient": "ber"},
		map[string]any{"recipient": "nyc", "time_zone": "America/New_York"})
	e["expires_local"] = "2027-03-28T12:00"
	r := b.do(t, "POST", "/v1/events", b.acme, e)
	expect(t, r, http.StatusOK)
	var res scheduleResult
	r.data(t, &res)
	// The contact's zone applies where the event names none.
	r = b.do(t, "POST", "/v1/events", b.acme, localEvent("", "2027-04-05T09:00", map[string]any{"recipient": "syd"}))
	expect(t, r, http.StatusOK)
	var syd scheduleResult
	r.data(t, &syd)
	for _, want := range []struct {
		id                        int64
		due, expires, zone, asked string
	}{
		{res.Notifications[0].ID, "2027-03-28T01:30:00Z", "2027-03-28T10:00:00Z", "Europe/Berlin", "2027-03-28T02:30:00"},
		{res.Notifications[1].ID, "2027-03-28T06:30:00Z", "2027-03-28T16:00:00Z", "America/New_York", "2027-03-28T02:30:00"},
		{syd.Notifications[0].ID, "2027-04-04T23:00:00Z", "", "Australia/Sydney", "2027-04-05T09:00:00"},
	} {
		r = b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", want.id), b.acme, nil)
		var d detailResponse
		r.data(t, &d)
		expires := ""
		if d.ExpiresAt != nil && want.expires != "" {
			expires = d.ExpiresAt.Format(time.RFC3339)
		}
		if d.DueAt.Format(time.RFC3339) != want.due || expires != want.expires || d.TimeZone != want.zone ||
			d.DueLocal != want.asked {
			t.Errorf("row %d (%s): due %s expires %q zone %q local %q; want %+v", want.id, d.Recipient,
				d.DueAt.Format(time.RFC3339), expires, d.TimeZone, d.DueLocal, want)
		}
	}
	// A replay lands on the same rows.
	r = b.do(t, "POST", "/v1/events", b.acme, e)
	var again scheduleResult
	r.data(t, &again)
	if again.Created != 0 || again.Notifications[0].ID != res.Notifications[0].ID {
		t.Errorf("replay: %+v, want the same rows", again)
	}
}

// Each bad local-time field of an event is a 400 naming the field, the
// value and what is accepted, and nothing is written.
func TestEventInLocalTimeRefusals(t *testing.T) {
	b := setup(t)
	one := map[string]any{"recipient": "a"}
	withField := func(e map[string]any, k string, v any) map[string]any { e[k] = v; return e }
	for _, tc := range []struct {
		name  string
		event map[string]any
		field string
		says  string
	}{
		{"bad zone", localEvent("America/NewYork", "2027-03-14T09:30", one), "time_zone", "America/NewYork"},
		{"bad recipient zone", localEvent("Europe/Berlin", "2027-03-14T09:30",
			map[string]any{"recipient": "a", "time_zone": "Mars/Olympus"}), "recipients[0].time_zone", "Mars/Olympus"},
		{"bad local time", localEvent("America/New_York", "2027-03-14 09:30", one), "due_local", "like 2027-03-28T09:00"},
		{"an offset", localEvent("America/New_York", "2027-03-14T09:30:00-04:00", one), "due_local", "carries an offset"},
		{"a gap refused", withField(localEvent("America/New_York", "2027-03-14T02:30", one), "disambiguation", "reject"),
			"due_local", "does not exist in America/New_York"},
		{"a bad disambiguation", withField(localEvent("America/New_York", "2027-03-14T09:30", one), "disambiguation", "first"),
			"disambiguation", "compatible"},
		{"no zone anywhere", localEvent("", "2027-03-14T09:30", one), "recipients[0].time_zone", "contact"},
		{"both forms", withField(localEvent("UTC", "2027-03-14T09:30", one), "occurred_at", "2027-03-14T09:30:00Z"),
			"due_local", "not both"},
		{"a delay", withField(localEvent("UTC", "2027-03-14T09:30", one), "delay_seconds", 60), "delay_seconds", "occurred_at"},
		{"expires in", withField(localEvent("UTC", "2027-03-14T09:30", one), "expires_in_seconds", 60),
			"expires_in_seconds", "expires_local"},
		{"expiry before due", withField(localEvent("UTC", "2027-03-14T09:30", one), "expires_local", "2027-03-14T09:00"),
			"expires_local", "after"},
	} {
		r := b.do(t, "POST", "/v1/events", b.acme, tc.event)
		e := expectField(t, r, http.StatusBadRequest, tc.field)
		if !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %s: %q does not say %q", tc.name, tc.field, e.Message, tc.says)
		}
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Errorf("refused events wrote %d rows", n)
	}
}
