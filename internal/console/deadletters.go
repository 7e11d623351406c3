package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// confirmShown bounds the ids a confirmation page lists.
const confirmShown = 50

type filterForm struct {
	Tenant, Kind, Reason, OlderThan string
}

func (f filterForm) parse() (ops.DeadLetterFilter, error) {
	out := ops.DeadLetterFilter{Tenant: strings.TrimSpace(f.Tenant), Kind: strings.TrimSpace(f.Kind), Reason: strings.TrimSpace(f.Reason)}
	if s := strings.TrimSpace(f.OlderThan); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return out, fmt.Errorf("older than %q is not a duration like 10m or 2h", s)
		}
		out.OlderThan = d
	}
	return out, nil
}

// Query is the filter as a query string, for links back to the list.
func (f filterForm) Query() string {
	return url.Values{"tenant": {f.Tenant}, "kind": {f.Kind}, "reason": {f.Reason}, "older_than": {f.OlderThan}}.Encode()
}

func formOf(get func(string) string) filterForm {
	return filterForm{Tenant: get("tenant"), Kind: get("kind"), Reason: get("reason"), OlderThan: get("older_than")}
}

type deadLettersData struct {
	Filter filterForm
	List   []ops.Described
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, op operator) {
	d := deadLettersData{Filter: formOf(r.URL.Query().Get)}
	f, err := d.Filter.parse()
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "deadletters", "Dead letters", d, err.Error())
		return
	}
	if d.List, err = ops.FindDeadLetters(r.Context(), c.o.Queue, c.o.Ledger, f, c.o.Clock.Now()); err != nil {
		c.show(w, op, http.StatusServiceUnavailable, "deadletters", "Dead letters", d, err.Error())
		return
	}
	c.show(w, op, http.StatusOK, "deadletters", "Dead letters", d, "")
}

type deadLetterData struct {
	D    ops.Described
	Body string
}

func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request, op operator) {
	all, err := ops.FindDeadLetters(r.Context(), c.o.Queue, c.o.Ledger, ops.DeadLetterFilter{}, c.o.Clock.Now())
	if err != nil {
		c.show(w, op, http.StatusServiceUnavailable, "deadletters", "Dead letters", deadLettersData{}, err.Error())
		return
	}
	i := slices.IndexFunc(all, func(d ops.Described) bool { return d.ID == r.PathValue("id") })
	if i < 0 {
		c.show(w, op, http.StatusNotFound, "deadletters", "Dead letters", deadLettersData{List: all},
			fmt.Sprintf("%s is not a dead letter of the queue (any more)", r.PathValue("id")))
		return
	}
	var body bytes.Buffer
	if json.Indent(&body, all[i].Body, "", "  ") != nil {
		body.Reset()
		body.Write(all[i].Body)
	}
	c.show(w, op, http.StatusOK, "deadletter", "Dead letter "+all[i].ID, deadLetterData{D: all[i], Body: body.String()}, "")
}

// actionData is a dead-letter action's confirmation and its result.
type actionData struct {
	Verb, Scope string
	Filter      filterForm
	// IDs are the dead letters chosen (scope selected), or those the filter
	// matched when the page was drawn (scope matching).
	IDs   []string
	Shown []string
	Count int
	// Done is set once the action ran.
	Done    bool
	Changed int
	Kept    []ops.KeptDeadLetter
}

// KeptPermanent says whether a redrive kept a row because its last attempt
// failed permanently, so the page says how to force it.
func (a actionData) KeptPermanent() bool {
	for _, k := range a.Kept {
		if k.Permanent {
			return true
		}
	}
	return false
}

// deadLetterAction redrives or deletes the chosen dead letters, or every one
// the filter matches: first a confirmation page, then, confirmed, the same
// code owedctl dlq runs and an audit line.
func (c *Console) deadLetterAction(w http.ResponseWriter, r *http.Request, op operator) {
	ctx := r.Context()
	verb, scope, _ := strings.Cut(r.PostFormValue("do"), "-")
	a := actionData{Verb: verb, Scope: scope, Filter: formOf(r.PostFormValue)}
	if (verb != "redrive" && verb != "delete") || (scope != "selected" && scope != "matching") {
		c.show(w, op, http.StatusBadRequest, "deadletters", "Dead letters", deadLettersData{Filter: a.Filter},
			"unknown action: redrive or delete, the selected dead letters or all matching")
		return
	}
	f, err := a.Filter.parse()
	if err != nil {
		c.show(w, op, http.StatusBadRequest, "deadletters", "Dead letters", deadLettersData{Filter: a.Filter}, err.Error())
		return
	}
	if scope == "selected" {
		f = ops.DeadLetterFilter{}
	}
	found, err := ops.FindDeadLetters(ctx, c.o.Queue, c.o.Ledger, f, c.o.Clock.Now())
	if err != nil {
		c.show(w, op, http.StatusServiceUnavailable, "deadletters", "Dead letters", deadLettersData{Filter: a.Filter}, err.Error())
		return
	}
	picked := r.PostForm["id"]
	list, missing := ops.SelectDeadLetters(ops.Plain(found), picked, scope == "matching", "the queue")
	for _, d := range list {
		a.IDs = append(a.IDs, d.ID)
	}
	a.Count = len(a.IDs)
	a.Shown = a.IDs[:min(len(a.IDs), confirmShown)]
	if scope == "selected" && len(picked) == 0 {
		c.show(w, op, http.StatusBadRequest, "deadletters", "Dead letters", deadLettersData{Filter: a.Filter, List: found},
			"tick the dead letters to "+verb+" first")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		c.show(w, op, http.StatusOK, "confirm", "Confirm: "+verb, a, "")
		return
	}
	target := ops.DeadLetterTarget(a.IDs, f)
	if scope == "matching" {
		target = ops.DeadLetterTarget(nil, f)
	}
	// "reason" is the filter's; the operator's own is "why".
	reason := strings.TrimSpace(r.PostFormValue("why"))
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	// A row whose last attempt failed permanently is reopened only when the
	// operator says the cause is fixed (ledger.RedriveAny's force).
	force := verb == "redrive" && r.PostFormValue("force") == "yes"
	if force && reason == "" {
		c.show(w, op, http.StatusBadRequest, "confirm", "Confirm: "+verb, a,
			"say why (what was fixed) to redrive rows that failed permanently")
		return
	}
	a.Done = true
	// The audit line is written with the change: by the ledger's redrive
	// transaction, or before the queue removes what a delete names.
	by := ledger.OperatorAction{Operator: op.Name, Target: target, Reason: reason}
	var actErr error
	switch verb {
	case "redrive":
		var res ops.RedriveResult
		res, actErr = ops.RedriveDeadLetters(ctx, c.o.Queue, c.o.Ledger, list, by, force)
		a.Changed, a.Kept = res.Redriven, append(res.Kept, missing...)
	case "delete":
		a.Changed, actErr = ops.DeleteDeadLetters(ctx, c.o.Queue, c.o.Ledger, list, by)
		a.Kept = missing
	}
	by.Action, by.Count = "dlq_"+verb, a.Changed
	ops.Log(c.o.Log, by)
	status, errText := http.StatusOK, ""
	if actErr != nil {
		status, errText = http.StatusServiceUnavailable, actErr.Error()
	}
	c.show(w, op, status, "confirm", "Dead letters: "+verb, a, errText)
}

type auditData struct {
	Actions []ledger.OperatorAction
}

// auditLimit is how many audit lines the audit page lists.
const auditLimit = 200

func (c *Console) audit(w http.ResponseWriter, r *http.Request, op operator) {
	list, err := c.o.Ledger.ReadsRole().OperatorActions(r.Context(), auditLimit)
	errText := ""
	if err != nil {
		errText = "read the audit trail: " + err.Error()
	}
	c.show(w, op, http.StatusOK, "audit", "Audit trail", auditData{Actions: list}, errText)
}
