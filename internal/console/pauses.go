package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/pace"
)

// Pausing sends runs the pace's own operator pauses (pace.Accounts.Hold and
// Resume, pace.Tenants.Pause and Resume), as owedctl provider pause/resume
// and owedctl tenants pause/resume do: every worker reads them and gives a
// held row back to the queue without an attempt.

// paceView is the provider accounts' pace and the operator pauses, for the
// dashboard and the pauses page.
type paceView struct {
	Accounts []pace.AccountState
	Tenants  []pace.TenantPause
}

// Paused says whether anything is held or paused.
func (p paceView) Paused() bool {
	if len(p.Tenants) > 0 {
		return true
	}
	for _, a := range p.Accounts {
		if a.Held() || a.Open() || a.Wait > 0 {
			return true
		}
	}
	return false
}

func (c *Console) readPace(ctx context.Context, problems *[]string) paceView {
	var v paceView
	var err error
	if v.Accounts, err = c.accounts.List(ctx); err != nil {
		*problems = append(*problems, err.Error())
	}
	if v.Tenants, err = c.tenants.List(ctx); err != nil {
		*problems = append(*problems, err.Error())
	}
	return v
}

type pausesData struct {
	Pace paceView
}

func (c *Console) pauses(w http.ResponseWriter, r *http.Request, op operator) {
	var problems []string
	v := c.readPace(r.Context(), &problems)
	c.show(w, op, http.StatusOK, "pauses", "Pause sends", pausesData{Pace: v}, strings.Join(problems, "; "))
}

// pauseAction is one pause or resume: what, on which account or tenant.
type pauseAction struct {
	// Do is hold-account, resume-account, pause-tenant or resume-tenant.
	Do, Name, Reason string
	Done             bool
	Result           string
}

func (a pauseAction) Verb() string { v, _, _ := strings.Cut(a.Do, "-"); return v }
func (a pauseAction) Kind() string { _, k, _ := strings.Cut(a.Do, "-"); return k }

// pauseAct holds or resumes a provider account, or pauses or resumes a
// tenant, after a confirmation; the pace's functions write the audit line
// in the same statement as the change.
func (c *Console) pauseAct(w http.ResponseWriter, r *http.Request, op operator) {
	ctx := r.Context()
	a := pauseAction{Do: r.PostFormValue("do"), Name: strings.TrimSpace(r.PostFormValue("name")),
		Reason: strings.TrimSpace(r.PostFormValue("why"))}
	fail := func(status int, msg string) {
		var problems []string
		c.show(w, op, status, "pauses", "Pause sends", pausesData{Pace: c.readPace(ctx, &problems)}, msg)
	}
	switch {
	case a.Do != "hold-account" && a.Do != "resume-account" && a.Do != "pause-tenant" && a.Do != "resume-tenant":
		fail(http.StatusBadRequest, "unknown action: hold or resume an account, pause or resume a tenant")
		return
	case a.Name == "":
		fail(http.StatusBadRequest, "name the "+a.Kind())
		return
	case (a.Verb() == "hold" || a.Verb() == "pause") && (a.Reason == "" || len(a.Reason) > pace.MaxPauseReason):
		fail(http.StatusBadRequest, fmt.Sprintf("say why (up to %d characters): the other operators and the rows' last error show it", pace.MaxPauseReason))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		c.show(w, op, http.StatusOK, "pauseconfirm", "Confirm: "+a.Verb()+" "+a.Kind(), a, "")
		return
	}
	var err error
	changed := 1
	switch a.Do {
	case "hold-account":
		err = c.accounts.Hold(ctx, a.Name, a.Reason, op.Name)
		a.Result = "Provider account " + a.Name + " is held: no worker sends on it until it is resumed."
	case "resume-account":
		var was bool
		was, err = c.accounts.Resume(ctx, a.Name, op.Name, a.Reason)
		a.Result = "Provider account " + a.Name + " resumed: the rows it held back return from the queue within a minute."
		if !was {
			changed, a.Result = 0, "Provider account "+a.Name+" was not paused; nothing changed."
		}
	case "pause-tenant":
		err = c.tenants.Pause(ctx, a.Name, a.Reason, op.Name)
		a.Result = "Tenant " + a.Name + " is paused: no worker sends its rows until it is resumed."
	case "resume-tenant":
		var was bool
		was, err = c.tenants.Resume(ctx, a.Name, op.Name, a.Reason)
		a.Result = "Tenant " + a.Name + " resumed: the rows its pause held back return from the queue within a minute."
		if !was {
			changed, a.Result = 0, "Tenant "+a.Name+" was not paused; nothing changed."
		}
	}
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	a.Done = true
	// The pace's function wrote the audit line with the change itself.
	ops.Log(c.o.Log, ledger.OperatorAction{Operator: op.Name,
		Action: a.Kind() + "_" + a.Verb(), Target: a.Kind() + "=" + a.Name, Count: changed, Reason: a.Reason})
	c.show(w, op, http.StatusOK, "pauseconfirm", "Pause sends", a, "")
}
