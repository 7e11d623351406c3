package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// listLimit is how many rows a page of the list shows.
const listLimit = 50

// maxReason bounds the reason an operator gives for an action.
const maxReason = 500

type findData struct {
	Q        ops.ListQuery
	ID       string
	States   []ledger.State
	Searched bool
	Page     ops.ListPage
}

// Link is the list's address with its filter, for the page links; with
// cursor, from that position. Every value is query-escaped, so the address
// is safe as it is.
func (d findData) Link(cursor string) template.URL {
	q := d.Q
	v := url.Values{}
	for k, s := range map[string]string{"tenant": q.Tenant, "state": q.State, "kind": q.Kind, "channel": q.Channel,
		"recipient": q.Recipient, "recipient_prefix": q.RecipientPrefix, "ref": q.Ref, "due_from": q.DueFrom,
		"due_to": q.DueTo, "settled_from": q.SettledFrom, "settled_to": q.SettledTo, "cursor": cursor} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return template.URL(Prefix + "notifications?" + v.Encode())
}

// CountsOrdered are the page's counts in a row's life order, the states
// with no row left out.
func (d findData) CountsOrdered() []stateCount {
	var out []stateCount
	for _, st := range d.States {
		if n := d.Page.Counts.ByState[st]; n > 0 {
			out = append(out, stateCount{string(st), n})
		}
	}
	return out
}

// notifications lists a tenant's rows by state, kind, channel, recipient
// or its prefix, ref and due and settle time ranges, newest due first, a
// page at a time (the API's keyset cursor), with the counts by state of
// everything the filter matches (ops.ListNotifications, as owedctl
// notifications list); an id finds a row of any tenant.
func (c *Console) notifications(w http.ResponseWriter, r *http.Request, op operator) {
	q := r.URL.Query()
	d := findData{ID: strings.TrimSpace(q.Get("id")), States: ops.ListStates(), Q: ops.ListQuery{Tenant: q.Get("tenant"),
		State: q.Get("state"), Kind: q.Get("kind"), Channel: q.Get("channel"), Recipient: q.Get("recipient"),
		RecipientPrefix: q.Get("recipient_prefix"), Ref: q.Get("ref"), DueFrom: q.Get("due_from"), DueTo: q.Get("due_to"),
		SettledFrom: q.Get("settled_from"), SettledTo: q.Get("settled_to"), Cursor: q.Get("cursor")}}
	if d.ID != "" {
		id, err := ops.ParseID(d.ID)
		if err != nil {
			c.show(w, op, http.StatusBadRequest, "find", "Notifications", d, err.Error())
			return
		}
		http.Redirect(w, r, Prefix+"notifications/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
		return
	}
	if d.Q.Tenant == "" {
		c.show(w, op, http.StatusOK, "find", "Notifications", d, "")
		return
	}
	d.Searched = true
	page, err := ops.ListNotifications(r.Context(), c.o.Ledger, d.Q, listLimit)
	if err != nil {
		d.Searched = false
		c.show(w, op, http.StatusBadRequest, "find", "Notifications", d, err.Error())
		return
	}
	d.Page = page
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
		c.show(w, op, http.StatusBadRequest, "find", "Notifications", findData{States: ops.ListStates()}, err.Error())
		return ledger.Detail{}, false
	}
	d, err := ops.ShowNotification(r.Context(), c.o.Ledger, id)
	if err != nil {
		c.show(w, op, http.StatusNotFound, "find", "Notifications", findData{ID: r.PathValue("id"), States: ops.ListStates()}, err.Error())
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
// UTC (ops.ParseTime).
const dueInputLayout = "2006-01-02T15:04"

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
		if due, err = ops.ParseTime("new due time", a.Due); err != nil {
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
		if do == ops.ActionRedrive {
			// Its dead letter is done with: the next sweep publishes afresh.
			if n, err := ops.DropDeadLettersOf(ctx, c.o.Queue, d.ID); err != nil {
				data.Audit = "the row is reopened, but its dead letters were not removed (remove them on the dead letters page): " + err.Error()
			} else if n > 0 {
				data.Result += fmt.Sprintf(" Its %d dead letter(s) removed.", n)
			}
		}
		if err := ops.Record(ctx, c.o.Ledger, c.o.Log, ledger.OperatorAction{Operator: op.Name, Action: do.AuditName(),
			Target: target, Count: 1, Reason: a.Reason}); err != nil {
			data.Audit = strings.TrimPrefix(data.Audit+"; ", "; ") + "the audit row was not written (the log line was): " + err.Error()
		}
	}
	c.show(w, op, status, "notification", title, data, errText)
}
