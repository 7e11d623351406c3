package api

import (
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
