package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// lastInstant is how .NET serialises DateTime.MaxValue: the last
// microsecond the ledger can hold (ledger.MaxTime).
const lastInstant = "9999-12-31T23:59:59.999999Z"

// scheduleExpiring schedules one acme row of subject (follow_up, ref) due at
// due, expiring window later, and returns its id.
func (b *bundle) scheduleExpiring(t *testing.T, ref string, due time.Time, window time.Duration) int64 {
	t.Helper()
	n := note("+15550001", ref, due)
	n["expires_at"] = due.Add(window).Format(time.RFC3339Nano)
	var res scheduleResult
	r := b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(n))
	expect(t, r, http.StatusOK)
	r.data(t, &res)
	return res.Notifications[0].ID
}

// readRow reads one acme row through the API.
func (b *bundle) readRow(t *testing.T, id int64) detailResponse {
	t.Helper()
	var d detailResponse
	r := b.do(t, http.MethodGet, fmt.Sprintf("/v1/notifications/%d", id), b.acme, nil)
	expect(t, r, http.StatusOK)
	r.data(t, &d)
	return d
}

// Issue 25: a reschedule to the last instant the ledger holds, of a row
// with an expiry, moves the expiry past it. On a row not in flight the API
// answered 500 (the expiry, clamped onto the due time, broke the row's
// CHECK); it is now 400 naming due_at, the message saying the latest due
// time that keeps the subject's expiries, and the row is unchanged. A move
// that would only clamp the expiry (shortening the window the notification
// is worth sending in) is refused the same way.
func TestRescheduleTheLedgerCannotHoldIsRefused(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	id := b.scheduleExpiring(t, "T-1", due, time.Hour)
	for _, to := range []string{lastInstant, "9999-12-31T23:00:00Z", "9999-12-31T23:59:59.999999-00:00"} {
		r := b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme,
			map[string]any{"kind": "follow_up", "ref_id": "T-1", "due_at": to})
		e := expectField(t, r, http.StatusBadRequest, "due_at")
		if !strings.Contains(e.Message, "9999-12-31T22:59:59.999999Z") {
			t.Errorf("reschedule to %s: message %q does not give the latest due_at the expiry allows", to, e.Message)
		}
	}
	d := b.readRow(t, id)
	if !d.DueAt.Equal(due) || d.ExpiresAt == nil || !d.ExpiresAt.Equal(due.Add(time.Hour)) || d.State != ledger.StatePending {
		t.Errorf("refused reschedule changed the row: %+v", d.Notification)
	}
	// The latest due time the message names is accepted, expiry and all.
	r := b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "due_at": "9999-12-31T22:59:59.999999Z"})
	expect(t, r, http.StatusOK)
	if d := b.readRow(t, id); d.ExpiresAt == nil || d.ExpiresAt.Format(time.RFC3339Nano) != lastInstant {
		t.Errorf("expiry after the move to the latest due time: %v, want %s", d.ExpiresAt, lastInstant)
	}
	// A row without an expiry has nothing to move past the end, and keeps
	// no expiry: the clamp once gave every rescheduled row one (least()
	// ignores a NULL), and at the last instant that broke the row's CHECK.
	var s scheduleResult
	b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(note("+15550002", "T-2", due))).data(t, &s)
	for _, to := range []string{"2027-01-01T00:00:00Z", lastInstant} {
		expect(t, b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme,
			map[string]any{"kind": "follow_up", "ref_id": "T-2", "due_at": to}), http.StatusOK)
		if d := b.readRow(t, s.Notifications[0].ID); d.ExpiresAt != nil || d.DueAt.Format(time.RFC3339Nano) != to {
			t.Errorf("row without an expiry moved to %s: due %s, expires %v; want no expiry", to, d.DueAt, d.ExpiresAt)
		}
	}
}

// Issue 25: the same reschedule of a row a worker is sending was accepted
// as an intent whose expiry was not after its due time; applying it when
// the send ended broke the row's CHECK, failing every shared batch that
// touched the row. It is now refused before anything is recorded, and the
// send's release, the way the worker's claim path ends it, goes through.
func TestRescheduleInFlightTheLedgerCannotHoldIsRefused(t *testing.T) {
	b := setup(t)
	now := b.clk.Now()
	id := b.scheduleExpiring(t, "T-1", now, 10*time.Minute)
	c, err := b.ledger.ClaimForSend(ctx, "acme", id, ledger.ClaimParams{DueAt: now, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if d := b.readRow(t, id); d.State != ledger.StateSending {
		t.Fatalf("claimed row reads %s, want sending", d.State)
	}
	r := b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-1", "due_at": lastInstant})
	expectField(t, r, http.StatusBadRequest, "due_at")
	if err := b.ledger.ReleaseClaim(ctx, c.Hold, time.Second, time.Minute, "waiting for the provider's pace", nil, false); err != nil {
		t.Fatalf("release of the row after the refused reschedule: %v", err)
	}
	if d := b.readRow(t, id); d.State == ledger.StateSending || d.State.Settled() || !d.DueAt.Equal(now) ||
		!d.ExpiresAt.Equal(now.Add(10*time.Minute)) {
		t.Errorf("row after the release: %s due %s expiring %v, want it handed back, owed at its own times", d.State, d.DueAt, d.ExpiresAt)
	}
}

// Issue 29 (4): a list cursor whose time is outside what the ledger holds
// was passed to SQL, and answered 500 ("pq: time zone displacement out of
// range"); it is 400 naming cursor.
func TestCursorOutOfRangeIsRefused(t *testing.T) {
	b := setup(t)
	for _, c := range []string{
		"djEuLTkyMjMzNzIwMzY4NTQ3NzU4MDguMQ", // v1.-9223372036854775808.1
		(ledger.Position{DueAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), ID: 1}).Cursor(),
		(ledger.Position{DueAt: time.Date(0, 12, 31, 23, 59, 59, 999999000, time.UTC), ID: 1}).Cursor(),
	} {
		expectField(t, b.do(t, http.MethodGet, "/v1/notifications?cursor="+c, b.acme, nil), http.StatusBadRequest, "cursor")
	}
	// The ends of the range are cursors the API may make, and read.
	for _, at := range []time.Time{ledger.MinTime, ledger.MaxTime} {
		expect(t, b.do(t, http.MethodGet, "/v1/notifications?cursor="+(ledger.Position{DueAt: at, ID: 1}).Cursor(),
			b.acme, nil), http.StatusOK)
	}
}

// The accepted range of a time, end to end: its first and last microsecond
// are scheduled and read back; a microsecond outside either end is 400
// naming the field, and so is the zero time (.NET's DateTime.MinValue, a
// time a client never set), which the ledger would read as missing. .NET's
// DateTime.MaxValue, finer than a microsecond, is the last microsecond.
// PostgreSQL's non-finite and BC times, which SQL writers can store, are
// not RFC 3339 and never reach it through the API.
func TestTheLedgerTimeRange(t *testing.T) {
	b := setup(t)
	for i, c := range []struct{ due, want string }{
		{"0001-01-01T00:00:00.000001Z", "0001-01-01T00:00:00.000001Z"},
		{"9999-12-31T23:59:59.9999999Z", lastInstant},
		{"0001-01-01T01:00:00.000001+01:00", "0001-01-01T00:00:00.000001Z"},
	} {
		n := note(fmt.Sprintf("+1555000%d", i), "T-1", b.clk.Now())
		n["due_at"] = c.due
		var s scheduleResult
		r := b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(n))
		expect(t, r, http.StatusOK)
		r.data(t, &s)
		if d := b.readRow(t, s.Notifications[0].ID); d.DueAt.Format(time.RFC3339Nano) != c.want {
			t.Errorf("due_at %s reads back as %s, want %s", c.due, d.DueAt.Format(time.RFC3339Nano), c.want)
		}
	}
	expect(t, b.do(t, http.MethodGet, "/v1/notifications?limit=1", b.acme, nil), http.StatusOK)
	for _, due := range []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00.0000009Z", "0001-01-01T00:00:00.000001+00:01",
		"10000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999-00:01", "infinity", "-infinity", "NaN", "0044-03-15T00:00:00 BC"} {
		n := note("+15550009", "T-2", b.clk.Now())
		n["due_at"] = due
		e := expectField(t, b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(n)), http.StatusBadRequest,
			"notifications[0].due_at")
		if !strings.Contains(e.Message, ledger.TimeRange) && !strings.Contains(e.Message, "RFC 3339") {
			t.Errorf("due_at %s: message %q does not say what is accepted", due, e.Message)
		}
	}
}
