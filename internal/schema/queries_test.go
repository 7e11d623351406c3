package schema

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/owedhq/owed/internal/sqlfile"
	"github.com/owedhq/owed/internal/testdb"

	// Every package that keeps its queries in sql/queries.sql, so that
	// sqlfile.All holds each file.
	_ "github.com/owedhq/owed/internal/archive"
	_ "github.com/owedhq/owed/internal/ledger"
	_ "github.com/owedhq/owed/internal/materialise"
	_ "github.com/owedhq/owed/internal/migrate"
	_ "github.com/owedhq/owed/internal/pace"
	_ "github.com/owedhq/owed/internal/resolve"
	_ "github.com/owedhq/owed/internal/service"
	_ "github.com/owedhq/owed/internal/tenant"
)

// queryFiles are the files the blank imports above load; a package that
// moves its queries into a file adds itself to both.
var queryFiles = []string{
	"internal/archive/sql/queries.sql",
	"internal/ledger/sql/queries.sql",
	"internal/materialise/sql/queries.sql",
	"internal/migrate/sql/queries.sql",
	"internal/pace/sql/queries.sql",
	"internal/resolve/sql/queries.sql",
	"internal/service/sql/queries.sql",
	"internal/tenant/sql/queries.sql",
}

// TestNamedQueriesPrepare holds the queries the Go code runs true to the
// schema they run on: every named query of every sql/queries.sql PREPAREs
// against a migrated database (a column, table or function it names that
// the schema lacks, or a parameter whose type cannot be told, fails it),
// and every one is bound to a Go variable (an unused query is dead SQL).
func TestNamedQueriesPrepare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	loaded := map[string]*sqlfile.Queries{}
	for _, q := range sqlfile.All() {
		loaded[q.File()] = q
	}
	if len(loaded) != len(queryFiles) {
		t.Errorf("%d query files loaded, %d listed in queryFiles", len(loaded), len(queryFiles))
	}
	db := testdb.New(t)
	for _, file := range queryFiles {
		q, ok := loaded[file]
		if !ok {
			t.Errorf("%s: not loaded; import its package above", file)
			continue
		}
		for _, name := range q.Unused() {
			t.Errorf("%s: %s is bound to no Go variable: use it or remove it", file, name)
		}
		// As the runtime role, in a transaction rolled back at the end:
		// preparing changes nothing, and parsing checks what the role's
		// statements name, not what it may run. internal/archive runs as
		// the schema's owner, and names the tables retention detaches,
		// which exist only while it retires a month.
		role, owner := db.App, file == "internal/archive/sql/queries.sql"
		if owner {
			role = db.Owner
		}
		begin := func() *sql.Tx {
			tx, err := role.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if owner {
				retiring(t, tx)
			}
			return tx
		}
		tx := begin()
		for _, name := range q.Names() {
			st, err := tx.PrepareContext(ctx, q.Text(name))
			if err != nil {
				t.Errorf("%s: %s does not prepare against the migrated schema: %v", file, name, err)
				// A failed statement aborts the transaction.
				tx.Rollback()
				tx = begin()
				continue
			}
			st.Close()
		}
		tx.Rollback()
	}
}

// retiring stands in, for the transaction tx, the tables retention names
// while it retires a month (the three *_retiring, internal/archive), which
// a migrated database holds only then: temporary tables shaped as their
// parents, which the transaction's rollback takes away.
func retiring(t *testing.T, tx *sql.Tx) {
	t.Helper()
	for _, parent := range []string{"owed_notifications", "owed_notification_attempts", "owed_receipts"} {
		if _, err := tx.Exec(fmt.Sprintf(`CREATE TEMP TABLE %s_retiring (LIKE %s) ON COMMIT DROP`, parent, parent)); err != nil {
			t.Fatal(err)
		}
	}
}
