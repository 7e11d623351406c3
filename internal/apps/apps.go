// Package apps owns which tenants an owed_apps login may name: the logins
// of applications that write SQL themselves (docs/security.md). A login of
// owed_apps sees and writes a tenant's rows only in a transaction that
// names the tenant (owed.tenant_id) and only when a binding gives the
// login that tenant; the policies check it against the database's
// session_user (internal/apps/sql/logins.sql), so a login cannot borrow
// another's bindings.
//
// Binding a login hands out a tenant's credentials, as minting a token
// does, so Bindings runs as a member of owed_token_admin (owedctl apps, as
// owedctl tokens), and every bind and unbind writes its line of the
// operators' audit trail in the same statement, with the database login
// that ran it. It never grants owed_apps itself: creating a login and
// making it a member is the database administrator's.
package apps

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

// Bounds the table checks, in bytes.
const (
	// MaxLogin is Postgres's longest role name (NAMEDATALEN - 1).
	MaxLogin = 63
	// MaxOperator and MaxReason are the audit trail's bounds.
	MaxOperator = 256
	MaxReason   = 1024
)

const (
	// qBind binds login $1 to tenant $2 and audits it as operator $3 with
	// reason $4 (owed_apps_bind); it answers whether the binding is new.
	qBind = `SELECT owed_apps_bind($1, $2, $3, $4)`
	// qUnbind removes the binding, audited the same way (owed_apps_unbind).
	qUnbind = `SELECT owed_apps_unbind($1, $2, $3, $4)`
	// qList reads the bindings, of login $1 or of every login when $1 is
	// empty.
	qList = `SELECT login, tenant_id, bound_at, bound_by, bound_login FROM owed_apps_logins
 WHERE $1 = '' OR login = $1 ORDER BY login, tenant_id`
)

// Binding is one login's permission to name one tenant.
type Binding struct {
	Login   string    `json:"login"`
	Tenant  string    `json:"tenant_id"`
	BoundAt time.Time `json:"bound_at"`
	// BoundBy is the operator owedctl named; BoundLogin the database login
	// that ran it, as the database recorded it.
	BoundBy    string `json:"bound_by"`
	BoundLogin string `json:"bound_login"`
}

// Bindings reads and writes the bindings over a pool of a member of
// owed_token_admin.
type Bindings struct{ db *sql.DB }

// New returns the bindings over db.
func New(db *sql.DB) *Bindings { return &Bindings{db: db} }

// check refuses, naming the field, what the table or the audit trail
// would.
func check(login, tenantID, operator, reason string) error {
	var errs []error
	if login == "" || len(login) > MaxLogin {
		errs = append(errs, fmt.Errorf("login %q must be 1 to %d bytes (a Postgres role name)", login, MaxLogin))
	}
	if err := tenant.Validate(tenantID); err != nil {
		errs = append(errs, err)
	}
	if operator == "" || len(operator) > MaxOperator {
		errs = append(errs, fmt.Errorf("operator must be 1 to %d bytes: who binds, for the audit trail", MaxOperator))
	}
	if len(reason) > MaxReason {
		errs = append(errs, fmt.Errorf("reason must be at most %d bytes (got %d)", MaxReason, len(reason)))
	}
	return errors.Join(errs...)
}

// Bind lets login name tenantID, and reports whether it could not before.
// The login must exist and be a member of owed_apps. operator says who
// binds; the audit trail records it beside the database login.
func (b *Bindings) Bind(ctx context.Context, login, tenantID, operator, reason string) (bool, error) {
	return b.write(ctx, qBind, "bind", login, tenantID, operator, reason)
}

// Unbind stops login naming tenantID, and reports whether it could: its
// next statement in that tenant's scope sees nothing.
func (b *Bindings) Unbind(ctx context.Context, login, tenantID, operator, reason string) (bool, error) {
	return b.write(ctx, qUnbind, "unbind", login, tenantID, operator, reason)
}

func (b *Bindings) write(ctx context.Context, query, verb, login, tenantID, operator, reason string) (bool, error) {
	if err := check(login, tenantID, operator, reason); err != nil {
		return false, err
	}
	var changed bool
	if err := b.db.QueryRowContext(ctx, query, login, tenantID, operator, reason).Scan(&changed); err != nil {
		return false, fmt.Errorf("apps: %s login %q and tenant %q: %w", verb, login, tenantID, err)
	}
	return changed, nil
}

// List reads the bindings of login, or of every login when login is empty,
// by login then tenant.
func (b *Bindings) List(ctx context.Context, login string) ([]Binding, error) {
	rows, err := b.db.QueryContext(ctx, qList, login)
	if err != nil {
		return nil, fmt.Errorf("apps: list the bindings: %w", err)
	}
	defer rows.Close()
	out := []Binding{}
	for rows.Next() {
		var x Binding
		if err := rows.Scan(&x.Login, &x.Tenant, &x.BoundAt, &x.BoundBy, &x.BoundLogin); err != nil {
			return nil, fmt.Errorf("apps: list the bindings: %w", err)
		}
		x.BoundAt = x.BoundAt.UTC()
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("apps: list the bindings: %w", err)
	}
	return out, nil
}
