package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// PUT /v1/quiet-hours holds the tenant's rows due outside its windows
// until the next opening; an urgent row is not held; GET shows the hold.
func TestQuietHoursThroughTheAPI(t *testing.T) {
	b := setup(t)
	now := b.clk.Now() // Sunday, 12:00 UTC
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", now)))
	expect(t, r, http.StatusOK)
	var sched scheduleResult
	r.data(t, &sched)

	r = b.do(t, "PUT", "/v1/quiet-hours", b.acme, map[string]any{"scope": "tenant",
		"windows": []string{"mon-fri 08:00-20:00"}, "time_zone": "Europe/Berlin"})
	expect(t, r, http.StatusOK)
	var res ledger.HoldResult
	r.data(t, &res)
	if res != (ledger.HoldResult{Held: 1}) {
		t.Fatalf("answer %+v, want one row held", res)
	}
	urgent := note("+15550002", "T-1", now)
	urgent["urgent"] = true
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(urgent)), http.StatusOK)

	r = b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", sched.Notifications[0].ID), b.acme, nil)
	var d detailResponse
	r.data(t, &d)
	if d.DueAt.Format(time.RFC3339) != "2026-03-02T07:00:00Z" || d.Hold != "held for quiet hours until 2026-03-02T07:00:00Z" {
		t.Errorf("held row: due %s hold %q; want Monday 08:00 in Berlin", d.DueAt, d.Hold)
	}
	r = b.do(t, "GET", "/v1/notifications?recipient=%2B15550002", b.acme, nil)
	var list listPage
	r.data(t, &list)
	if len(list.Notifications) != 1 || !list.Notifications[0].DueAt.Equal(now) || !list.Notifications[0].Urgent {
		t.Errorf("urgent row: %+v, want due now", list.Notifications)
	}

	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"scope": "team", "windows": []string{"mon-fri 08:00-20:00"}}, "scope"},
		{map[string]any{"scope": "tenant", "windows": []string{"weekdays 9-5"}}, "windows[0]"},
		{map[string]any{"scope": "tenant", "windows": []string{"daily 08:00-20:00"}, "time_zone": "Berlin"}, "time_zone"},
	} {
		expectField(t, b.do(t, "PUT", "/v1/quiet-hours", b.acme, bad.body), http.StatusBadRequest, bad.field)
	}
	if r := b.do(t, "PUT", "/v1/quiet-hours", b.acme, `{"scope":`); r.status != http.StatusBadRequest ||
		r.apiErr(t).Code != codeMalformedJSON {
		t.Errorf("malformed: %d %s", r.status, r.body)
	}
}

// GET /v1/quiet-hours reads back every scope the tenant set, in its own
// scope only; its query takes the tenant alone.
func TestGetQuietHours(t *testing.T) {
	b := setup(t)
	read := func(token, query string) quietHoursAnswer {
		t.Helper()
		r := b.do(t, "GET", "/v1/quiet-hours"+query, token, nil)
		expect(t, r, http.StatusOK)
		var a quietHoursAnswer
		r.data(t, &a)
		return a
	}
	if a := read(b.acme, ""); a.QuietHours == nil || len(a.QuietHours) != 0 {
		t.Errorf("before any window: %+v, want an empty list", a)
	}
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", b.acme, map[string]any{"scope": "tenant",
		"windows": []string{"mon-fri 08:00-20:00"}, "time_zone": "Europe/Berlin"}), http.StatusOK)
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", b.acme, map[string]any{"scope": "kind:digest",
		"windows": []string{"daily 07:00-08:00", "daily 18:00-19:00"}}), http.StatusOK)
	a := read(b.acme, "")
	if len(a.QuietHours) != 2 || a.QuietHours[0].Scope != "kind:digest" || len(a.QuietHours[0].Windows) != 2 ||
		a.QuietHours[1].Scope != "tenant" || a.QuietHours[1].TimeZone != "Europe/Berlin" ||
		a.QuietHours[1].Windows[0] != "mon-fri 08:00-20:00" {
		t.Errorf("acme's windows: %+v", a.QuietHours)
	}
	if a := read(serviceToken, "?tenant=acme"); len(a.QuietHours) != 2 {
		t.Errorf("with the service token: %+v", a.QuietHours)
	}
	if a := read(b.globex, ""); len(a.QuietHours) != 0 {
		t.Errorf("globex sees %+v, want none of acme's", a.QuietHours)
	}
	expectField(t, b.do(t, "GET", "/v1/quiet-hours?scope=tenant", b.acme, nil), http.StatusBadRequest, "scope")
	expectField(t, b.do(t, "GET", "/v1/quiet-hours", serviceToken, nil), http.StatusBadRequest, "tenant")
	expectField(t, b.do(t, "GET", "/v1/quiet-hours?tenant=acme", b.globex, nil), http.StatusForbidden, "tenant")
	if r := b.do(t, "GET", "/v1/quiet-hours", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s", r.status, r.body)
	}
}

// A PATCH that lands while the row is being sent answers that it is not
// certain; when the send is handed back, the row takes the windows in force
// at its new time, and GET says "held for quiet hours until …" in its zone.
func TestPatchInFlightTakesTheQuietHours(t *testing.T) {
	b := setup(t)
	now := b.clk.Now() // Sunday, 12:00 UTC
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", now)))
	expect(t, r, http.StatusOK)
	var sched scheduleResult
	r.data(t, &sched)
	id := sched.Notifications[0].ID
	c, err := b.ledger.ClaimForSend(ctx, "acme", id, ledger.ClaimParams{DueAt: now, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	expect(t, b.do(t, "PUT", "/v1/quiet-hours", b.acme, map[string]any{"scope": "tenant",
		"windows": []string{"mon-fri 08:00-20:00"}}), http.StatusOK)
	// Tuesday 21:00 in Berlin, after the window closed.
	r = b.do(t, "PATCH", fmt.Sprintf("/v1/notifications/%d", id), b.acme, map[string]any{
		"due_local": "2026-03-03T21:00", "time_zone": "Europe/Berlin", "payload": map[string]any{"text": "later"}})
	expect(t, r, http.StatusOK)
	var u ledger.UpdateResult
	r.data(t, &u)
	if !u.InFlight || !u.Intent || u.Certain {
		t.Fatalf("PATCH in flight answered %+v, want an intent, not certain", u)
	}
	if err := b.ledger.ReleaseClaim(ctx, c.Hold, time.Second, time.Minute, "waiting for the provider's pace", nil, false); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", id), b.acme, nil)
	var d detailResponse
	r.data(t, &d)
	if d.State != ledger.StatePending || d.DueAt.Format(time.RFC3339) != "2026-03-04T07:00:00Z" ||
		d.HeldFrom == nil || d.HeldFrom.Format(time.RFC3339) != "2026-03-03T20:00:00Z" ||
		d.Hold != "held for quiet hours until 2026-03-04T08:00:00+01:00" || d.TimeZone != "Europe/Berlin" {
		t.Errorf("handed back: %s due %s held_from %v hold %q zone %q; want pending, held to Wednesday 08:00 in Berlin",
			d.State, d.DueAt, d.HeldFrom, d.Hold, d.TimeZone)
	}
}
