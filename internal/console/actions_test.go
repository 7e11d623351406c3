package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// act posts one action on row id: the form as the notification page sends
// it, then, when confirm is set, as the confirmation sends it.
func act(t *testing.T, b *bundle, c *http.Client, id int64, form url.Values, confirm bool) (*http.Response, string) {
	t.Helper()
	u := fmt.Sprintf("%s/console/notifications/%d", b.srv.URL, id)
	_, page := do(t, c, "GET", u, nil, nil)
	form.Set("csrf", csrfOf(t, page))
	if confirm {
		form.Set("confirm", "yes")
	}
	return do(t, c, "POST", u+"/action", form, nil)
}

// The notification page cancels, reschedules and sends now an open row,
// each confirmed first, with a reason, audited; a settled row is refused
// with the reason and no audit line.
func TestNotificationPageActs(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	ctx := context.Background()
	rows := b.stack.Schedule(t, "acme", 3, time.Now().Add(time.Hour), nil)
	c := b.login(t, "alice")

	if resp, body := act(t, b, c, rows[0].ID, url.Values{"do": {"cancel"}}, true); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(body, "say why") {
		t.Errorf("a cancel without a reason answered %d", resp.StatusCode)
	}
	resp, body := act(t, b, c, rows[0].ID, url.Values{"do": {"cancel"}, "why": {"customer left"}}, false)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="confirm"`) {
		t.Fatalf("the cancel's confirmation answered %d: %s", resp.StatusCode, body)
	}
	if d, _ := b.stack.Ledger.Get(ctx, "acme", rows[0].ID); d.State != ledger.StatePending {
		t.Fatalf("the row is %s before the confirmation", d.State)
	}
	resp, body = act(t, b, c, rows[0].ID, url.Values{"do": {"cancel"}, "why": {"customer left"}}, true)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "now cancelled") {
		t.Fatalf("the cancel answered %d: %s", resp.StatusCode, body)
	}
	if d, _ := b.stack.Ledger.Get(ctx, "acme", rows[0].ID); d.State != ledger.StateCancelled || d.SettledAt == nil {
		t.Errorf("the cancelled row is %s, settled %v", d.State, d.SettledAt)
	}
	resp, body = act(t, b, c, rows[0].ID, url.Values{"do": {"reschedule"}, "why": {"again"}, "due": {"2030-01-01T10:00"}}, true)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "a settled row is never changed") {
		t.Errorf("a reschedule of the cancelled row answered %d: %s", resp.StatusCode, body)
	}

	newDue := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Minute)
	resp, body = act(t, b, c, rows[1].ID, url.Values{"do": {"reschedule"}, "why": {"snooze"}, "due": {newDue.Format("2006-01-02T15:04")}}, true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the reschedule answered %d: %s", resp.StatusCode, body)
	}
	if d, _ := b.stack.Ledger.Get(ctx, "acme", rows[1].ID); !d.DueAt.Equal(newDue) || d.State != ledger.StatePending || d.QueueGeneration != 1 {
		t.Errorf("the rescheduled row is due %s (%s, generation %d), want %s", d.DueAt, d.State, d.QueueGeneration, newDue)
	}
	if resp, body := act(t, b, c, rows[1].ID, url.Values{"do": {"reschedule"}, "why": {"x"}, "due": {"tomorrow"}}, true); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(body, `new due time &#34;tomorrow&#34; is not a time`) {
		t.Errorf("a reschedule to %q answered %d: %s", "tomorrow", resp.StatusCode, body)
	}

	before := time.Now()
	resp, body = act(t, b, c, rows[2].ID, url.Values{"do": {"send-now"}, "why": {"customer waiting"}}, true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the send now answered %d: %s", resp.StatusCode, body)
	}
	if d, _ := b.stack.Ledger.Get(ctx, "acme", rows[2].ID); d.DueAt.After(time.Now()) || d.DueAt.Before(before.Add(-time.Minute)) {
		t.Errorf("the row sent now is due %s", d.DueAt)
	}
	if resp, body := act(t, b, c, rows[2].ID, url.Values{"do": {"send-now"}, "why": {"again"}}, true); resp.StatusCode != http.StatusConflict ||
		!strings.Contains(body, "due already") {
		t.Errorf("a second send now answered %d: %s", resp.StatusCode, body)
	}

	actions, err := b.stack.Ledger.OperatorActions(ctx, 10)
	if err != nil || len(actions) != 3 {
		t.Fatalf("audit rows %+v (%v), want the three changes", actions, err)
	}
	want := []struct{ action, reason string }{{"notification_send_now", "customer waiting"}, {"notification_reschedule", "snooze"}, {"notification_cancel", "customer left"}}
	for i, w := range want {
		if a := actions[i]; a.Action != w.action || a.Reason != w.reason || a.Operator != "alice" || !strings.HasPrefix(a.Target, "tenant=acme id=") {
			t.Errorf("audit row %d is %+v, want %s by alice because %q", i, a, w.action, w.reason)
		}
	}
	// Without the CSRF field the form is refused.
	u := fmt.Sprintf("%s/console/notifications/%d/action", b.srv.URL, rows[1].ID)
	if resp, _ := do(t, c, "POST", u, url.Values{"do": {"cancel"}, "why": {"x"}, "confirm": {"yes"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an action without the CSRF field answered %d, want 403", resp.StatusCode)
	}
}

// A row whose last send failed permanently is redriven only with force:
// without it the page warns and the action is refused, unaudited.
func TestRedriveOfAPermanentFailureNeedsForce(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	ctx := context.Background()
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	row := b.stack.Schedule(t, "acme", 1, due, nil)[0]
	cl, err := b.stack.Ledger.ClaimForSend(ctx, "acme", row.ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || cl.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	now := time.Now()
	if err := b.stack.Ledger.SettleFailed(ctx, cl.Hold, "recipient unknown", &ledger.Attempt{Attempt: 1, Provider: "sandbox",
		StartedAt: now, FinishedAt: now, Outcome: ledger.AttemptPermanent, Error: "recipient unknown"}, false); err != nil {
		t.Fatal(err)
	}
	c := b.login(t, "alice")
	_, page := do(t, c, "GET", fmt.Sprintf("%s/console/notifications/%d", b.srv.URL, row.ID), nil, nil)
	if !strings.Contains(page, `id="permanent"`) || !strings.Contains(page, `id="act-force"`) || strings.Contains(page, `id="act-cancel"`) {
		t.Errorf("the failed row's page lacks the warning and the force box, or offers a cancel: %s", page)
	}
	resp, body := act(t, b, c, row.ID, url.Values{"do": {"redrive"}, "why": {"retry"}}, true)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "failed permanently") {
		t.Fatalf("a redrive without force answered %d: %s", resp.StatusCode, body)
	}
	if d, _ := b.stack.Ledger.Get(ctx, "acme", row.ID); d.State != ledger.StateFailed {
		t.Fatalf("the refused redrive left the row %s", d.State)
	}
	resp, body = act(t, b, c, row.ID, url.Values{"do": {"redrive"}, "why": {"address fixed"}, "force": {"yes"}}, false)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="warning"`) {
		t.Fatalf("the forced redrive's confirmation answered %d without the warning: %s", resp.StatusCode, body)
	}
	resp, body = act(t, b, c, row.ID, url.Values{"do": {"redrive"}, "why": {"address fixed"}, "force": {"yes"}}, true)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "now pending") {
		t.Fatalf("the forced redrive answered %d: %s", resp.StatusCode, body)
	}
	actions, err := b.stack.Ledger.OperatorActions(ctx, 10)
	if err != nil || len(actions) != 1 || actions[0].Action != "notification_redrive" || !strings.HasSuffix(actions[0].Target, " force") {
		t.Errorf("audit rows %+v (%v), want one forced redrive", actions, err)
	}
}
