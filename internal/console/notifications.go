package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

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
	rows, err := ops.FindNotifications(r.Context(), c.o.Reads, d.Tenant,
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
}

func (c *Console) detail(w http.ResponseWriter, r *http.Request, op operator) (ledger.Detail, bool) {
	id, err := ops.ParseID(r.PathValue("id"))
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "find", "Notifications", findData{}, err.Error())
		return ledger.Detail{}, false
	}
	d, err := ops.ShowNotification(r.Context(), c.o.Reads, id)
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
	c.show(w, op, http.StatusOK, "notification", "Notification "+strconv.FormatInt(d.ID, 10),
		detailData{D: d, Timeline: ops.Timeline(d)}, "")
}

// revealPayload shows a row's payload, another tenant's data, only with a
// reason, and audits the read.
func (c *Console) revealPayload(w http.ResponseWriter, r *http.Request, op operator) {
	d, ok := c.detail(w, r, op)
	if !ok {
		return
	}
	data := detailData{D: d, Timeline: ops.Timeline(d)}
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
