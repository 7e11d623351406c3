package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// findLimit is how many rows the find page lists.
const findLimit = 100

// maxReason bounds the reason an operator gives for an action.
const maxReason = 500

type findData struct {
	Tenant, Recipient, Ref, Kind, ID string
	Searched                         bool
	Rows                             []ledger.Notification
}

// notifications finds rows: by id across tenants, or a tenant's rows by
// recipient, ref and kind (ops.FindNotifications, as owedctl's find).
func (c *Console) notifications(w http.ResponseWriter, r *http.Request, op operator) {
	q := r.URL.Query()
	d := findData{Tenant: q.Get("tenant"), Recipient: q.Get("recipient"), Ref: q.Get("ref"), Kind: q.Get("kind"),
		ID: strings.TrimSpace(q.Get("id"))}
	if d.ID != "" {
		id, err := ops.ParseID(d.ID)
		if err != nil {
			c.show(w, op, http.StatusBadRequest, "find", "Notifications", d, err.Error())
			return
		}
		http.Redirect(w, r, Prefix+"notifications/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
		return
	}
	if d.Tenant == "" {
		c.show(w, op, http.StatusOK, "find", "Notifications", d, "")
		return
	}
	d.Searched = true
	rows, err := ops.FindNotifications(r.Context(), c.o.Ledger, d.Tenant,
		ledger.Filter{Recipient: d.Recipient, RefID: d.Ref, Kind: d.Kind, Limit: findLimit})
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "find", "Notifications", d, err.Error())
		return
	}
	d.Rows = rows
	c.show(w, op, http.StatusOK, "find", "Notifications", d, "")
}

type detailData struct {
	D        ledger.Detail
	Timeline []ops.Event
	// Payload is shown only after an operator asked for it with a reason.
	Payload string
	Reason  string
	// Permanent is the error of the row's last send when it failed
	// permanently: a redrive then needs force.
	Permanent string
	// Result and Audit say what an action just did.
	Result, Audit string
}

// Open says whether the row may still be cancelled, rescheduled or sent
// now: it is not settled.
func (d detailData) Open() bool { return !d.D.State.Settled() }

// Failed says whether the row may be redriven.
func (d detailData) Failed() bool { return d.D.State == ledger.StateFailed }

// DueInput is the row's due time as a datetime-local field shows it, UTC.
func (d detailData) DueInput() string { return d.D.DueAt.UTC().Format(dueInputLayout) }

func newDetail(d ledger.Detail) detailData {
	data := detailData{D: d, Timeline: ops.Timeline(d)}
	if why, ok := ops.PermanentFailure(d); ok && d.State == ledger.StateFailed {
		data.Permanent = dash(why)
	}
	return data
}

func (c *Console) detail(w http.ResponseWriter, r *http.Request, op operator) (ledger.Detail, bool) {
	id, err := ops.ParseID(r.PathValue("id"))
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "find", "Notifications", findData{}, err.Error())
		return ledger.Detail{}, false
	}
	d, err := ops.ShowNotification(r.Context(), c.o.Ledger, id)
	if err != nil {
		c.show(w, op, http.StatusNotFound, "find", "Notifications", findData{ID: r.PathValue("id")}, err.Error())
		return d, false
	}
	return d, true
}

// notification is one row's page: its fields and its timeline, the
// compliance answer; the payload stays hidden.
func (c *Console) notification(w http.ResponseWriter, r *http.Request, op operator) {
	d, ok := c.detail(w, r, op)
	if !ok {
		return
	}
	c.show(w, op, http.StatusOK, "notification", "Notification "+strconv.FormatInt(d.ID, 10), newDetail(d), "")
}

// revealPayload shows a row's payload, another tenant's data, only with a
// reason, and audits the read.
func (c *Console) revealPayload(w http.ResponseWriter, r *http.Request, op operator) {
	d, ok := c.detail(w, r, op)
	if !ok {
		return
	}
	data := newDetail(d)
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	title := "Notification " + strconv.FormatInt(d.ID, 10)
	if reason == "" || len(reason) > maxReason {
		c.show(w, op, http.StatusBadRequest, "notification", title, data,
			"say why you read this tenant's payload (up to 500 characters): the audit trail records it")
		return
	}
	errText := ""
	if err := ops.Record(r.Context(), c.o.Ledger, c.o.Log, ledger.OperatorAction{Operator: op.Name, Action: "payload_read",
		Target: "tenant=" + d.Tenant + " id=" + strconv.FormatInt(d.ID, 10), Count: 1, Reason: reason}); err != nil {
		c.show(w, op, http.StatusServiceUnavailable, "notification", title, data,
			"the read could not be audited, so the payload stays hidden: "+err.Error())
		return
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, d.Payload, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(d.Payload)
	}
	data.Payload, data.Reason = pretty.String(), reason
	c.show(w, op, http.StatusOK, "notification", title, data, errText)
}

// dueInputLayout is a datetime-local field's value; the console reads it as
// UTC, and accepts RFC 3339 too.
const dueInputLayout = "2006-01-02T15:04"

// parseDue reads the new due time of a reschedule.
func parseDue(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, dueInputLayout, "2006-01-02T15:04:05", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("new due time %q is not a time like 2026-12-02T09:30 (UTC) or 2026-12-02T09:30:00+01:00", s)
}

// rowAction is a change of one row: its confirmation and its result.
type rowAction struct {
	D      ledger.Detail
	Do     ops.RowAction
	Reason string
	// Due is the new due time of a reschedule, as typed.
	Due   string
	Force bool
	// Warning is shown on the confirmation: a redrive of a permanent
	// failure, forced.
	Warning string
}

// Describe says what the action does, for the confirmation.
func (a rowAction) Describe() string {
	switch a.Do {
	case ops.ActionCancel:
		return "Cancel it: it settles cancelled and is never sent."
	case ops.ActionReschedule:
		return "Move it to " + a.Due + " UTC (its expiry moves by as much); a message already published is dropped as stale."
	case ops.ActionSendNow:
		return "Send it now: its due time becomes now and the sweeper publishes it at once; its expiry stays."
	case ops.ActionRedrive:
		return "Redrive it: it is pending again and the next sweep sends it once more, with the same provider idempotency key."
	}
	return ""
}

// rowActionTitle is an action's label.
func rowActionTitle(a ops.RowAction) string {
	switch a {
	case ops.ActionSendNow:
		return "send now"
	}
	return string(a)
}

// notificationAction cancels, reschedules, sends now or redrives one row:
// first a confirmation, then, confirmed, the change (ops.ChangeNotification,
// refused where the ledger refuses it) and an audit line, and the row's page
// again with what was done.
func (c *Console) notificationAction(w http.ResponseWriter, r *http.Request, op operator) {
	ctx := r.Context()
	d, ok := c.detail(w, r, op)
	if !ok {
		return
	}
	title := "Notification " + strconv.FormatInt(d.ID, 10)
	data := newDetail(d)
	do, err := ops.ParseRowAction(r.PostFormValue("do"))
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "notification", title, data, err.Error())
		return
	}
	a := rowAction{D: d, Do: do, Reason: strings.TrimSpace(r.PostFormValue("why")), Due: strings.TrimSpace(r.PostFormValue("due")),
		Force: r.PostFormValue("force") == "yes"}
	var due time.Time
	if do == ops.ActionReschedule {
		if due, err = parseDue(a.Due); err != nil {
			c.show(w, op, http.StatusBadRequest, "notification", title, data, err.Error())
			return
		}
		a.Due = due.Format(dueInputLayout)
	}
	if a.Reason == "" || len(a.Reason) > maxReason {
		c.show(w, op, http.StatusBadRequest, "notification", title, data,
			fmt.Sprintf("say why you %s it (up to %d characters): the audit trail records it", rowActionTitle(do), maxReason))
		return
	}
	if err := ops.CheckRedrive(d); do == ops.ActionRedrive && err != nil {
		if !a.Force {
			c.show(w, op, http.StatusConflict, "notification", title, data, err.Error()+" (tick “force”)")
			return
		}
		a.Warning = "Its last send failed permanently (" + data.Permanent + "): redrive only once the cause is fixed."
	}
	if r.PostFormValue("confirm") != "yes" {
		c.show(w, op, http.StatusOK, "rowconfirm", "Confirm: "+rowActionTitle(do)+" notification "+strconv.FormatInt(d.ID, 10), a, "")
		return
	}
	res, actErr := ops.ChangeNotification(ctx, c.o.Ledger, d.ID, do, due, a.Force)
	target := "tenant=" + d.Tenant + " id=" + strconv.FormatInt(d.ID, 10)
	if do == ops.ActionReschedule {
		target += " due=" + due.Format(time.RFC3339)
	}
	if a.Force {
		target += " force"
	}
	status, errText := http.StatusOK, ""
	if actErr != nil {
		// A refusal is shown and changes nothing, so it writes no audit line.
		status, errText = http.StatusConflict, actErr.Error()
		var refused *ledger.RowRefused
		if !errors.As(actErr, &refused) && !errors.Is(actErr, ops.ErrPermanentFailure) && !errors.Is(actErr, ledger.ErrConflict) {
			status = http.StatusServiceUnavailable
		}
	}
	if fresh, err := ops.ShowNotification(ctx, c.o.Ledger, d.ID); err == nil {
		data = newDetail(fresh)
	}
	if actErr == nil {
		data.Result = fmt.Sprintf("Notification %d: %s, was %s, now %s.", d.ID, rowActionTitle(do), res.Was, res.State)
		if err := ops.Record(ctx, c.o.Ledger, c.o.Log, ledger.OperatorAction{Operator: op.Name, Action: do.AuditName(),
			Target: target, Count: 1, Reason: a.Reason}); err != nil {
			data.Audit = "the audit row was not written (the log line was): " + err.Error()
		}
	}
	c.show(w, op, status, "notification", title, data, errText)
}
