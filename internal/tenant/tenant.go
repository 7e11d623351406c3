// Package tenant owns the tenant scope: what a tenant id may be, and the one
// place in Go that tells Postgres whose rows a transaction may see.
//
// Row-level security on every tenant table compares tenant_id with the
// transaction-local setting owed.tenant_id, for the roles the policies name
// (owed_runtime, owed_apps: internal/migrate/sql/roles.sql). Enter sets it,
// transaction-locally (set_config(…, true)), so a pooled connection never
// carries one request's scope into the next, and a statement run without it
// matches no row. There is no setting that opens every tenant: a
// cross-tenant statement is a SECURITY DEFINER function the runtime role may
// execute (owed_sweep_*, owed_ledger_*, owed_pace_*, ...: docs/sql.md), never
// a scope a session can enter.
//
// Nothing else in owed writes set_config for this setting; SQL functions
// that scope themselves (migrations) are the only other writers. The package
// never opens a scope for an id Validate rejects.
package tenant

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/sqlfile"
)

// MaxLength is the longest tenant id, in bytes. The tables check the same
// bound, so an id accepted here is never refused by the database.
const MaxLength = 128

// Validate says whether id may name a tenant: 1 to MaxLength bytes of valid
// UTF-8 with no NUL (Postgres text cannot hold one) and no control
// characters. The envelope, the API and the ledger all call it, so a message
// or request the ledger would refuse is refused at the edge, naming the field.
func Validate(id string) error {
	switch {
	case id == "":
		return errors.New("tenant_id is required")
	case len(id) > MaxLength:
		return fmt.Errorf("tenant_id must be at most %d bytes (got %d)", MaxLength, len(id))
	case !utf8.ValidString(id):
		return errors.New("tenant_id must be valid UTF-8")
	case strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("tenant_id must not contain control characters or NUL")
	}
	return nil
}

// Execer runs one statement in a transaction. *sql.Tx satisfies it; the
// ledger passes its own wrapper so the scope statement is prepared once per
// connection.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// queriesSQL holds qEnter, the only statement in Go that sets the scope
// (sql/queries.sql, docs/sql.md).
//
//go:embed sql/queries.sql
var queriesSQL string

var qEnter = sqlfile.MustParse("internal/tenant/sql/queries.sql", queriesSQL).Get("Enter")

// Enter scopes the transaction behind tx to id: from here until it ends, its
// statements see and write only id's rows.
func Enter(ctx context.Context, tx Execer, id string) error {
	if err := Validate(id); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if _, err := tx.ExecContext(ctx, qEnter, id); err != nil {
		return fmt.Errorf("tenant: enter scope: %w", err)
	}
	return nil
}

// InTx runs fn in a transaction on db scoped to id, and commits it when fn
// returns nil.
func InTx(ctx context.Context, db *sql.DB, id string, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := Enter(ctx, tx, id); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
