// Package resolve maps a ledger row's recipient to the address a provider
// needs, reading the owed_contacts table in the row's tenant scope. It never
// reads another tenant's contacts: every query runs in a transaction entered
// with tenant.Enter, and row-level security enforces it.
package resolve

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"

	"github.com/owedhq/owed/internal/sqlfile"
	"github.com/owedhq/owed/internal/tenant"
)

// queriesSQL is every statement the resolver runs, by name:
// sql/queries.sql (docs/sql.md).
//
//go:embed sql/queries.sql
var queriesSQL string

var qContact = sqlfile.MustParse("internal/resolve/sql/queries.sql", queriesSQL).Get("Contact")

// ErrNoContact is returned when a recipient has no address for a channel.
var ErrNoContact = errors.New("resolve: no contact for this recipient and channel")

// SQL resolves recipients through owed_contacts.
type SQL struct{ db *sql.DB }

// NewSQL returns a resolver over db (the application role).
func NewSQL(db *sql.DB) *SQL { return &SQL{db: db} }

// Resolve returns the contact's address; skip is true when the contact
// opted out. A missing contact is an error the worker retries, so a contact
// written just after its row was scheduled is still found.
func (r *SQL) Resolve(ctx context.Context, tenantID, recipient, channel string) (string, bool, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback()
	if err := tenant.Enter(ctx, tx, tenantID); err != nil {
		return "", false, err
	}
	var addr string
	var optedOut bool
	err = tx.QueryRowContext(ctx, qContact, tenantID, recipient, channel).Scan(&addr, &optedOut)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, fmt.Errorf("%w (recipient %q, channel %q)", ErrNoContact, recipient, channel)
	}
	if err != nil {
		return "", false, err
	}
	return addr, optedOut, tx.Commit()
}
