package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/testdb"
)

// homeFiles are the current definitions (docs/sql.md), in the order that
// builds the schema from an empty database: the roles first, then each
// table before the functions, policies and triggers that name it. Paths
// are relative to the repository's root.
var homeFiles = []string{
	"internal/migrate/sql/roles.sql",
	"internal/migrate/sql/versions.sql",
	"internal/apps/sql/logins.sql",
	"internal/session/sql/sessions.sql",
	"internal/ledger/sql/notifications.sql",
	"internal/ledger/sql/quiet_hours.sql",
	"internal/ledger/sql/digests.sql",
	"internal/ledger/sql/attempts.sql",
	// The per-minute counters count the rows and the attempts settled;
	// operator.sql's stats read them.
	"internal/ledger/sql/minutes.sql",
	"internal/ledger/sql/undeliverable.sql",
	"internal/ledger/sql/receipts.sql",
	"internal/ledger/sql/operator.sql",
	"internal/ledger/sql/erasures.sql",
	"internal/ledger/sql/retention.sql",
	"internal/ledger/sql/intents.sql",
	"internal/ledger/sql/grace.sql",
	"internal/ledger/sql/due_notify.sql",
	"internal/ledger/sql/claim.sql",
	"internal/ledger/sql/settle.sql",
	"internal/materialise/sql/items.sql",
	"internal/resolve/sql/contacts.sql",
	"internal/api/sql/tokens.sql",
	"internal/pace/sql/pace.sql",
	"internal/pace/sql/account.sql",
	"internal/pace/sql/tenant_pauses.sql",
	// The sweep's functions read the pace and the tenants' pauses.
	"internal/ledger/sql/sweep.sql",
	// The history reads the pace's 429 minutes.
	"internal/ledger/sql/history.sql",
}

// root is the repository's root, from this package's folder.
const root = "../.."

// home is the catalog the home files build, with the file that defines
// each object and what breaks the one-definition rule.
type home struct {
	cat      catalog
	file     map[string]string
	problems []string
}

// apply builds the schema from the home files in db (an empty database),
// in one transaction, reading the catalog after each file to learn which
// file defines which object. Every object must come from exactly one file:
// one that changes an object an earlier file defined, or drops it, is a
// problem, and so is a column or constraint defined outside its table's
// file (the table's CREATE is its one definition).
func apply(ctx context.Context, db *sql.DB) (home, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return home{}, err
	}
	defer tx.Rollback()
	// Handing a function to owed_definer takes membership of the role and
	// the role's CREATE on the schema; the migrations hold both for the
	// call alone (owed_definer_takes_functions), and so does this.
	if _, err := tx.ExecContext(ctx, "GRANT owed_definer TO CURRENT_USER"); err != nil {
		return home{}, fmt.Errorf("take owed_definer (the owner needs CREATEROLE): %w", err)
	}
	if _, err := tx.ExecContext(ctx, "GRANT CREATE ON SCHEMA public TO owed_definer"); err != nil {
		return home{}, err
	}
	h := home{file: map[string]string{}}
	prev, err := read(ctx, tx)
	if err != nil {
		return home{}, err
	}
	// What an empty database already holds (the public schema) may be
	// changed by one file, which is then its home.
	baseline := map[string]bool{}
	for k := range prev {
		baseline[k] = true
	}
	for _, f := range homeFiles {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return home{}, err
		}
		if _, err := tx.ExecContext(ctx, string(text)); err != nil {
			return home{}, fmt.Errorf("apply %s: %w", f, err)
		}
		cur, err := read(ctx, tx)
		if err != nil {
			return home{}, err
		}
		for k, def := range cur {
			old, had := prev[k]
			switch {
			case !had:
				h.file[k] = f
			case old == def:
			case baseline[k] && h.file[k] == "":
				h.file[k] = f
			default:
				h.problems = append(h.problems, fmt.Sprintf("%s: defined in %s and changed again in %s; "+
					"give it one definition, in the file of its owner", k, h.file[k], f))
			}
		}
		for k := range prev {
			if _, ok := cur[k]; !ok {
				h.problems = append(h.problems, fmt.Sprintf("%s: defined in %s and dropped in %s", k, h.file[k], f))
			}
		}
		prev = cur
	}
	for k, f := range h.file {
		if t := tableOf(k); t != "" && h.file[t] != f {
			h.problems = append(h.problems, fmt.Sprintf("%s: defined in %s, but its table is defined in %s: "+
				"a column or constraint belongs in its table's CREATE", k, f, h.file[t]))
		}
	}
	if _, err := tx.ExecContext(ctx, "REVOKE CREATE ON SCHEMA public FROM owed_definer"); err != nil {
		return home{}, err
	}
	if _, err := tx.ExecContext(ctx, "REVOKE owed_definer FROM CURRENT_USER"); err != nil {
		return home{}, err
	}
	if h.cat, err = read(ctx, tx); err != nil {
		return home{}, err
	}
	return h, tx.Commit()
}

// applyHome is apply, run again when another test's migration took the
// owner's membership of owed_definer away mid-way: roles are the cluster's,
// and every migration that hands a function to owed_definer grants and
// revokes that membership. A real privilege error fails every attempt.
func applyHome(t *testing.T, ctx context.Context, db *sql.DB) home {
	t.Helper()
	for attempt := 1; ; attempt++ {
		h, err := apply(ctx, db)
		var pqErr *pq.Error
		if err != nil && attempt < 3 && errors.As(err, &pqErr) && pqErr.Code == "42501" &&
			strings.Contains(pqErr.Message, "owed_definer") {
			t.Logf("attempt %d: %v; applying the home again", attempt, err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}

// compare reports every object the migrated catalog and the home's differ
// on, sorted by key: one the migrations produce that no home file defines,
// one a home file defines that the migrations do not produce, and one
// defined differently, with both definitions as a diff.
func compare(migrated catalog, h home) []string {
	var out []string
	for k, want := range migrated {
		got, ok := h.cat[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: the migrations produce it and no home file defines it; "+
				"define it in its owner's sql folder (docs/sql.md). The migrations produce:\n%s", k, want))
		case got != want:
			out = append(out, fmt.Sprintf("%s: %s and the migrations differ:\n%s", k, h.file[k],
				unified("migrations produce", "home says ("+h.file[k]+")", want, got)))
		}
	}
	for k := range h.cat {
		if _, ok := migrated[k]; !ok {
			out = append(out, fmt.Sprintf("%s: defined in %s, but the migrations do not produce it; "+
				"write the migration that does, or remove it from the home", k, h.file[k]))
		}
	}
	sort.Strings(out)
	return out
}

// TestHomeMatchesMigrations builds one database with the migrations and one
// from the home files, and holds them equal object by object: the current
// definition of every table, column, constraint, index, policy, trigger,
// sequence, grant and function is in exactly one home file, and it is what
// the migrations produce.
func TestHomeMatchesMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	migratedDB := testdb.New(t)
	migrated, err := read(ctx, migratedDB.Owner)
	if err != nil {
		t.Fatal(err)
	}
	homeDB := testdb.NewEmpty(t)
	h := applyHome(t, ctx, homeDB.Owner)
	t.Logf("%d objects in the migrated schema, %d built from %d home files", len(migrated), len(h.cat), len(homeFiles))

	t.Run("one definition each", func(t *testing.T) {
		for _, p := range h.problems {
			t.Error(p)
		}
	})
	t.Run("home equals migrations", func(t *testing.T) {
		for _, d := range compare(migrated, h) {
			t.Error(d)
		}
	})

	// The comparison sees a function's body: change one statement of one
	// function in the home's database and exactly that function is
	// reported, with the file that defines it and both bodies.
	t.Run("a changed body is reported", func(t *testing.T) {
		if len(compare(migrated, h)) > 0 {
			t.Skip("the home differs from the migrations already")
		}
		const fn = "owed_settle_delivered_batch(p_rows jsonb, p_now timestamp with time zone)"
		var def string
		if err := homeDB.Owner.QueryRowContext(ctx,
			"SELECT pg_get_functiondef('owed_settle_delivered_batch(jsonb, timestamptz)'::regprocedure)").Scan(&def); err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(def, "ORDER BY x.id, x.idx", "ORDER BY x.idx", 1)
		if changed == def {
			t.Fatal("owed_settle_delivered_batch no longer orders by x.id, x.idx: pick another change for this test")
		}
		if _, err := homeDB.Owner.ExecContext(ctx, changed); err != nil {
			t.Fatal(err)
		}
		cat, err := read(ctx, homeDB.Owner)
		if err != nil {
			t.Fatal(err)
		}
		report := compare(migrated, home{cat: cat, file: h.file})
		if len(report) != 1 {
			t.Fatalf("got %d differences, want 1 (function %s):\n%s", len(report), fn, strings.Join(report, "\n"))
		}
		for _, want := range []string{"function " + fn, "internal/ledger/sql/settle.sql",
			"- " + "             ORDER BY x.id, x.idx", "+ " + "             ORDER BY x.idx"} {
			if !strings.Contains(report[0], want) {
				t.Errorf("the report does not say %q:\n%s", want, report[0])
			}
		}
	})
}

// Every schema file in an owner's sql folder is applied by the test, so a
// new file cannot sit beside the others unchecked. queries.sql files hold
// the named queries the Go code runs, not definitions.
func TestEveryHomeFileIsApplied(t *testing.T) {
	t.Parallel()
	found, err := filepath.Glob(filepath.Join(root, "internal", "*", "sql", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no internal/*/sql/*.sql file found from " + root)
	}
	for _, f := range found {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if filepath.Base(rel) == "queries.sql" {
			continue
		}
		if !slices.Contains(homeFiles, rel) {
			t.Errorf("%s is not in homeFiles (home_test.go): add it where its tables and functions are created in order", rel)
		}
	}
}
