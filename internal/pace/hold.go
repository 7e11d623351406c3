package pace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/tenant"
)

// Operator pauses (owed_provider_account_hold, sql/account.sql;
// owed_tenant_pauses, sql/tenant_pauses.sql): on-call holds every send of a provider
// account (Accounts.Hold), or pauses every send of one tenant
// (Tenants.Pause), and the pause stays until on-call lifts it
// (Accounts.Resume, Tenants.Resume). Unlike the account's circuit, no
// worker's answer lifts either: a held account is never probed. Workers read
// both through Pauses, one statement for every hold and tenant pause, and
// give a claimed row of a held account or a paused tenant back to the queue
// without an attempt. Each hold, pause and resume writes its line of the
// operators' audit trail in the same statement (the SQL functions do), so
// the console and owedctl cannot leave one unrecorded.

// Bounds of an operator pause's texts (bytes), as the tables check them.
const (
	MaxPauseReason = 1024
	MaxPauseActor  = 128
)

// AccountHold is one held provider account.
type AccountHold struct {
	Account string    `json:"account"`
	Reason  string    `json:"reason"`
	Actor   string    `json:"actor"`
	Since   time.Time `json:"since"`
}

// TenantPause is one paused tenant.
type TenantPause struct {
	Tenant string    `json:"tenant_id"`
	Reason string    `json:"reason"`
	Actor  string    `json:"actor"`
	Since  time.Time `json:"since"`
}

// checkPause refuses a pause without a reason or an actor, or with either
// beyond its bound, naming the field.
func checkPause(reason, actor string) error {
	switch {
	case reason == "" || len(reason) > MaxPauseReason:
		return fmt.Errorf("pace: a pause needs a reason of 1 to %d bytes", MaxPauseReason)
	case actor == "" || len(actor) > MaxPauseActor:
		return fmt.Errorf("pace: a pause needs an actor (who pauses) of 1 to %d bytes", MaxPauseActor)
	}
	return nil
}

// checkOperator refuses a resume that names no operator, or an operator or
// a reason beyond its bound; a resume's reason may be empty.
func checkOperator(operator, reason string) error {
	switch {
	case operator == "" || len(operator) > MaxPauseActor:
		return fmt.Errorf("pace: a resume needs an operator (who resumes) of 1 to %d bytes", MaxPauseActor)
	case len(reason) > MaxPauseReason:
		return fmt.Errorf("pace: a reason is at most %d bytes", MaxPauseReason)
	}
	return nil
}

// checkAccount refuses an account name the pace table cannot hold.
func checkAccount(account string) error {
	if account == "" || len(account) > MaxAccountLength {
		return fmt.Errorf("pace: an account name is 1 to %d bytes", MaxAccountLength)
	}
	return nil
}

// Hold holds every send on account, in every worker, until Resume: an
// operator's pause, which no probe lifts. Holding a held account again
// replaces the reason and the actor and keeps the instant it was first held.
func (a *Accounts) Hold(ctx context.Context, account, reason, actor string) error {
	if err := errors.Join(checkAccount(account), checkPause(reason, actor)); err != nil {
		return err
	}
	if _, err := a.db.ExecContext(ctx, qAccountHold, account, reason, actor, a.clock.NowOrNil()); err != nil {
		return fmt.Errorf("pace: hold account %q: %w", account, err)
	}
	return nil
}

// Held lists the held accounts, longest held first.
func (a *Accounts) Held(ctx context.Context) ([]AccountHold, error) {
	p, err := ReadPauses(ctx, a.db)
	return p.Accounts, err
}

// Tenants are the tenants' pauses (owed_tenant_pauses), every worker's to
// read and on-call's to write through SECURITY DEFINER functions.
type Tenants struct{ store }

// NewTenants returns the tenants' pauses over db (the runtime role), on clk
// (clock.Real() when nil: the database's clock stamps a pause).
func NewTenants(db *sql.DB, clk clock.Clock) *Tenants { return &Tenants{newStore(db, clk)} }

// Pause pauses every send of the tenant until Resume. Pausing a paused
// tenant again replaces the reason and the actor and keeps the instant it
// was first paused.
func (t *Tenants) Pause(ctx context.Context, tenantID, reason, actor string) error {
	if err := errors.Join(tenant.Validate(tenantID), checkPause(reason, actor)); err != nil {
		return err
	}
	if _, err := t.db.ExecContext(ctx, qTenantPause, tenantID, reason, actor, t.clock.NowOrNil()); err != nil {
		return fmt.Errorf("pace: pause tenant %q: %w", tenantID, err)
	}
	return nil
}

// Resume lifts the tenant's pause and reports whether it was paused; the
// audit line names operator and reason (which may be empty).
func (t *Tenants) Resume(ctx context.Context, tenantID, operator, reason string) (bool, error) {
	if err := errors.Join(tenant.Validate(tenantID), checkOperator(operator, reason)); err != nil {
		return false, err
	}
	var was bool
	if err := t.db.QueryRowContext(ctx, qTenantResume, tenantID, operator, reason, t.clock.NowOrNil()).Scan(&was); err != nil {
		return false, fmt.Errorf("pace: resume tenant %q: %w", tenantID, err)
	}
	return was, nil
}

// List lists the paused tenants, longest paused first.
func (t *Tenants) List(ctx context.Context) ([]TenantPause, error) {
	p, err := ReadPauses(ctx, t.db)
	return p.Tenants, err
}

// Pauses are every operator pause, as one statement read them.
type Pauses struct {
	Accounts []AccountHold
	Tenants  []TenantPause
}

// ReadPauses reads every held account and paused tenant in one statement,
// longest paused first: what a worker checks its claimed rows against.
func ReadPauses(ctx context.Context, db *sql.DB) (Pauses, error) {
	var p Pauses
	rows, err := db.QueryContext(ctx, qPauses)
	if err != nil {
		return p, fmt.Errorf("pace: read the operator pauses: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind, name, reason, actor string
			since                     time.Time
		)
		if err := rows.Scan(&kind, &name, &reason, &actor, &since); err != nil {
			return Pauses{}, fmt.Errorf("pace: read the operator pauses: %w", err)
		}
		since = since.UTC()
		if kind == "account" {
			p.Accounts = append(p.Accounts, AccountHold{Account: name, Reason: reason, Actor: actor, Since: since})
		} else {
			p.Tenants = append(p.Tenants, TenantPause{Tenant: name, Reason: reason, Actor: actor, Since: since})
		}
	}
	if err := rows.Err(); err != nil {
		return Pauses{}, fmt.Errorf("pace: read the operator pauses: %w", err)
	}
	return p, nil
}
