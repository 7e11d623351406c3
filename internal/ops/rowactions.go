package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// The changes an operator makes to one notification (the console's
// notification page): cancel it, reschedule it, send it now, or redrive it
// when it failed. Each reads the row in its tenant's scope (GetAny) and
// changes it there; the ledger refuses what the row's state does not allow
// (ledger.RowRefused), and RedriveNotification refuses a permanent failure
// unless forced.

// RowAction names one change of a row.
type RowAction string

// The changes of a row.
const (
	ActionCancel     RowAction = "cancel"
	ActionReschedule RowAction = "reschedule"
	ActionSendNow    RowAction = "send-now"
	ActionRedrive    RowAction = "redrive"
)

// RowActions are every RowAction, in the order a page offers them.
var RowActions = []RowAction{ActionCancel, ActionReschedule, ActionSendNow, ActionRedrive}

// ParseRowAction reads an action's name.
func ParseRowAction(s string) (RowAction, error) {
	for _, a := range RowActions {
		if string(a) == s {
			return a, nil
		}
	}
	names := make([]string, len(RowActions))
	for i, a := range RowActions {
		names[i] = string(a)
	}
	return "", fmt.Errorf("action %q is not one of %s", s, strings.Join(names, ", "))
}

// AuditName is the action's name in the audit trail.
func (a RowAction) AuditName() string {
	return "notification_" + strings.ReplaceAll(string(a), "-", "_")
}

// ErrPermanentFailure is a redrive refused because the row's last send
// failed permanently: it would fail the same way at once.
var ErrPermanentFailure = errors.New("its last send failed permanently")

// PermanentFailure is the error of d's last attempt when it failed
// permanently (a bad address, an opt-out), "" otherwise.
func PermanentFailure(d ledger.Detail) (string, bool) {
	if len(d.History) == 0 {
		return "", false
	}
	last := d.History[len(d.History)-1]
	if last.Outcome != ledger.AttemptPermanent {
		return "", false
	}
	return last.Error, true
}

// Ledger is the part of the ledger a row's change calls: the reads that
// find the row and on-call's audited writes.
type Ledger interface {
	ledger.HasReads
	ledger.HasActions
}

// ChangeNotification runs action on row id of any tenant: due is the new
// due time of a reschedule, force redrives a permanent failure anyway.
func ChangeNotification(ctx context.Context, l Ledger, id int64, action RowAction, due time.Time, force bool) (ledger.RowChange, error) {
	d, err := ShowNotification(ctx, l, id)
	if err != nil {
		return ledger.RowChange{}, err
	}
	switch action {
	case ActionCancel:
		return l.ActionsRole().CancelRow(ctx, d.Tenant, id)
	case ActionReschedule:
		return l.ActionsRole().RescheduleRow(ctx, d.Tenant, id, due)
	case ActionSendNow:
		return l.ActionsRole().SendNowRow(ctx, d.Tenant, id)
	case ActionRedrive:
		return redriveRow(ctx, l.ActionsRole(), d, force)
	}
	return ledger.RowChange{}, fmt.Errorf("unknown action %q", action)
}

// CheckRedrive refuses a redrive of d without force when d failed
// permanently, with what to do; nil when nothing stands in the way.
func CheckRedrive(d ledger.Detail) error {
	if why, permanent := PermanentFailure(d); permanent && d.State == ledger.StateFailed {
		return fmt.Errorf("notification %d: %w (%s): a redrive sends to %s again and is likely to fail the same way "+
			"at once; fix the cause, then redrive with force", d.ID, ErrPermanentFailure, why, d.Recipient)
	}
	return nil
}

func redriveRow(ctx context.Context, l *ledger.Actions, d ledger.Detail, force bool) (ledger.RowChange, error) {
	c := ledger.RowChange{ID: d.ID, Tenant: d.Tenant, Was: d.State, State: d.State, DueAt: d.DueAt, ExpiresAt: d.ExpiresAt}
	if err := CheckRedrive(d); err != nil && !force {
		return c, err
	}
	res, err := l.RedriveTenant(ctx, d.Tenant, force, d.ID)
	if err != nil {
		return c, err
	}
	if len(res) != 1 || !res[0].Reopened {
		reason := "not found"
		if len(res) == 1 {
			reason = res[0].Reason
		}
		return c, &ledger.RowRefused{ID: d.ID, State: d.State, Reason: reason}
	}
	c.State = res[0].State
	return c, nil
}

// DropDeadLettersOf removes the dead letters whose envelope names row id,
// once the row is reopened (a redrive from its page): the next sweep
// publishes a fresh message, as RedriveDeadLetters removes the dead
// letters of the rows it reopens. It answers how many it removed. The
// row's redrive wrote the audit line; this is its consequence.
func DropDeadLettersOf(ctx context.Context, q queue.Queue, id int64) (int, error) {
	list, _, err := ListDeadLetters(ctx, q, DeadLetterPageMax, "", true)
	if err != nil {
		return 0, err
	}
	var drop []string
	for _, d := range list {
		if env, err := envelope.Decode(d.Body); err == nil && env.ID == id {
			drop = append(drop, d.ID)
		}
	}
	if len(drop) == 0 {
		return 0, nil
	}
	return q.DeleteDeadLetters(ctx, queueIDs(drop)...)
}
