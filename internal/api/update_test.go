package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// PATCH replaces a pending row's payload and due time, by id or by its
// schedule key, and answers that the change is certain; GET shows it.
func TestUpdatePendingNotification(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due)))
	expect(t, r, http.StatusOK)
	var sched scheduleResult
	r.data(t, &sched)
	id := sched.Notifications[0].ID
	path := fmt.Sprintf("/v1/notifications/%d", id)

	r = b.do(t, "PATCH", path, b.acme, map[string]any{"payload": map[string]any{"text": "new text"}})
	expect(t, r, http.StatusOK)
	var res ledger.UpdateResult
	r.data(t, &res)
	if res != (ledger.UpdateResult{ID: id, State: ledger.StatePending, Changed: true, Certain: true}) {
		t.Fatalf("answer %+v, want changed and certain", res)
	}
	later := due.Add(2 * time.Hour)
	r = b.do(t, "PATCH", "/v1/notifications", b.acme, map[string]any{"key": map[string]any{"recipient": "+15550001",
		"kind": "follow_up", "ref_id": "T-1", "due_at": due.Format(time.RFC3339)}, "due_at": later.Format(time.RFC3339)})
	expect(t, r, http.StatusOK)
	r = b.do(t, "GET", path, b.acme, nil)
	var d detailResponse
	r.data(t, &d)
	if !d.DueAt.Equal(later) || string(d.Payload) != `{"text":"new text"}` {
		t.Errorf("after the updates: due %s payload %s", d.DueAt, d.Payload)
	}

	// The refusals: each names what to fix.
	expectField(t, b.do(t, "PATCH", path, b.acme, map[string]any{"payload": map[string]any{"subject": "s"}}),
		http.StatusBadRequest, "payload.text")
	expectField(t, b.do(t, "PATCH", path, b.acme, map[string]any{}), http.StatusBadRequest, "payload")
	expectField(t, b.do(t, "PATCH", path, b.acme, map[string]any{"due_local": "2027-03-14T02:30", "time_zone": "America/New_York",
		"disambiguation": "reject"}), http.StatusBadRequest, "due_local")
	expectField(t, b.do(t, "PATCH", "/v1/notifications/x", b.acme, map[string]any{"payload": map[string]any{"text": "a"}}),
		http.StatusBadRequest, "id")
	expectField(t, b.do(t, "PATCH", "/v1/notifications", b.acme, map[string]any{"payload": map[string]any{"text": "a"}}),
		http.StatusBadRequest, "key")
	expectField(t, b.do(t, "PATCH", "/v1/notifications", b.acme, map[string]any{"key": map[string]any{"recipient": "a",
		"kind": "k", "ref_id": "r"}, "payload": map[string]any{"text": "a"}}), http.StatusBadRequest, "key.due_at")
	expect(t, b.do(t, "PATCH", "/v1/notifications/999999", b.acme, map[string]any{"payload": map[string]any{"text": "a"}}),
		http.StatusNotFound)
	expect(t, b.do(t, "PATCH", path, b.globex, map[string]any{"payload": map[string]any{"text": "a"}}), http.StatusNotFound)

	for _, p := range []string{path, "/v1/notifications"} {
		if r := b.do(t, "PATCH", p, b.acme, `{"payload":`); r.status != http.StatusBadRequest || r.apiErr(t).Code != codeMalformedJSON {
			t.Errorf("PATCH %s with malformed JSON: %d %s", p, r.status, r.body)
		}
	}
	byKey := func(due time.Time, change map[string]any) map[string]any {
		change["key"] = map[string]any{"recipient": "+15550001", "kind": "follow_up", "ref_id": "T-1",
			"due_at": due.Format(time.RFC3339)}
		return change
	}
	expect(t, b.do(t, "PATCH", "/v1/notifications", b.acme, byKey(due, map[string]any{"payload": map[string]any{"text": "a"}})),
		http.StatusNotFound)

	// A move onto another row's key, and a settled row, are 409.
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due))), http.StatusOK)
	e := expectField(t, b.do(t, "PATCH", path, b.acme, map[string]any{"due_at": due.Format(time.RFC3339)}),
		http.StatusConflict, "due_at")
	if e.Code != codeConflict {
		t.Errorf("code %s, want conflict", e.Code)
	}
	expect(t, b.do(t, "POST", "/v1/notifications/cancel", b.acme, map[string]any{"kind": "follow_up", "ref_id": "T-1"}),
		http.StatusOK)
	for _, r := range []response{
		b.do(t, "PATCH", path, b.acme, map[string]any{"payload": map[string]any{"text": "late"}}),
		b.do(t, "PATCH", "/v1/notifications", b.acme, byKey(later, map[string]any{"payload": map[string]any{"text": "late"}})),
	} {
		expect(t, r, http.StatusConflict)
		if e := r.apiErr(t); e.Code != codeConflict {
			t.Errorf("update of a cancelled row: %+v", e)
		}
	}
}

// A row whose send is in flight takes the update as an intent, and the
// answer says the change is not certain.
func TestUpdateInFlightIsNotCertain(t *testing.T) {
	b := setup(t)
	due := b.clk.Now()
	r := b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", due)))
	var sched scheduleResult
	r.data(t, &sched)
	id := sched.Notifications[0].ID
	if c, err := b.ledger.ClaimForSend(ctx, "acme", id, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute}); err != nil ||
		c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	r = b.do(t, "PATCH", fmt.Sprintf("/v1/notifications/%d", id), b.acme, map[string]any{"payload": map[string]any{"text": "x"}})
	expect(t, r, http.StatusOK)
	var res ledger.UpdateResult
	r.data(t, &res)
	if res != (ledger.UpdateResult{ID: id, State: ledger.StateSending, InFlight: true, Intent: true}) {
		t.Errorf("answer %+v, want an intent on the send in flight, not certain", res)
	}
}
