package migrate

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"

	"github.com/pressly/goose/v3"

	"github.com/owedhq/owed/internal/sqlfile"
	"github.com/owedhq/owed/migrations"
)

// OldestSchema is the oldest schema this build runs on: its code works on a
// database migrated only that far (the previous release's head, when every
// migration since is expand-only and the code tolerates their absence).
// Raise it when code starts to depend on a migration; readiness refuses an
// older schema with "run owedctl migrate up". 43: the claims' revocable
// column (00040), the settle batch's set_aside answer (00042) and the
// default grace's setter (00043) are used by this code.
const OldestSchema = 43

// queriesSQL is every statement this package runs itself, by name:
// sql/queries.sql (docs/sql.md). owed_schema_compat, which they keep,
// records per applied migration the oldest binary that may still run on it
// (sql/versions.sql).
//
//go:embed sql/queries.sql
var queriesSQL string

var (
	queries           = sqlfile.MustParse("internal/migrate/sql/queries.sql", queriesSQL)
	qSchemaVersion    = queries.Get("SchemaVersion")
	qCompatExists     = queries.Get("CompatExists")
	qCompatRequires   = queries.Get("CompatRequires")
	qAnnounceContract = queries.Get("AnnounceContract")
	qForgetRolledBack = queries.Get("ForgetRolledBack")
	qRecordApplied    = queries.Get("RecordApplied")
)

// breaksBeforeMarker is the line a contract migration carries: binaries
// whose own schema is older than the number no longer run once it is
// applied. A migration without it is expand-only and breaks no binary.
var breaksBeforeMarker = regexp.MustCompile(`(?m)^--\s*owed:breaks-before\s+(\S+)\s*$`)

// BreaksBefore reads a migration's `-- owed:breaks-before NNN` line: 0 when
// it has none. The number must be at most the migration's own version (a
// migration cannot ask for a binary newer than itself), and one line at most.
func BreaksBefore(version int64, sqlText string) (int64, error) {
	m := breaksBeforeMarker.FindAllStringSubmatch(sqlText, -1)
	switch len(m) {
	case 0:
		return 0, nil
	case 1:
	default:
		return 0, fmt.Errorf("migration %05d: %d owed:breaks-before lines, want at most one", version, len(m))
	}
	n, err := strconv.ParseInt(m[0][1], 10, 64)
	if err != nil || n < 0 || n > version {
		return 0, fmt.Errorf("migration %05d: owed:breaks-before %q must be a schema version from 0 to %d", version, m[0][1], version)
	}
	return n, nil
}

// Build is the range of schemas a binary runs on: from Oldest (its
// OldestSchema) to Head (its newest embedded migration, the number that
// names the build's schema), and beyond Head any schema whose migrations
// break no binary of Head.
type Build struct {
	Oldest, Head int64
}

// This returns this binary's Build.
func This() (Build, error) {
	h, err := Head(migrations.FS)
	return Build{Oldest: OldestSchema, Head: h}, err
}

// Head is the newest migration in fsys (a folder of numbered SQL files), as
// goose numbers them: the schema a build of those migrations is named by.
func Head(fsys fs.FS) (int64, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return 0, fmt.Errorf("list migrations: %w", err)
	}
	var h int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", n, err)
		}
		h = max(h, v)
	}
	return h, nil
}

// Compat is a database's schema as a Build sees it.
type Compat struct {
	Build Build
	// Schema is the database's version (0: never migrated).
	Schema int64
	// Requires is the oldest binary schema that may run on the database:
	// the largest breaks_before of its applied migrations.
	Requires int64
}

// Err says why the build cannot run on the schema, and what to do; nil when
// it can.
func (c Compat) Err() error {
	switch {
	case c.Schema < c.Build.Oldest:
		return fmt.Errorf("schema %d is older than this release's oldest supported %d: run owedctl migrate up", c.Schema, c.Build.Oldest)
	case c.Requires > c.Build.Head:
		return fmt.Errorf("schema %d requires binaries of schema ≥ %d; this build is %d: upgrade the binary or roll the schema back "+
			"with owedctl migrate down-to %d", c.Schema, c.Requires, c.Build.Head, c.Build.Head)
	}
	return nil
}

// String describes a compatible schema for /readyz.
func (c Compat) String() string {
	if err := c.Err(); err != nil {
		return err.Error()
	}
	if c.Schema > c.Build.Head {
		return fmt.Sprintf("ok: schema %d, newer than this build's %d and compatible with it", c.Schema, c.Build.Head)
	}
	return fmt.Sprintf("ok: schema %d", c.Schema)
}

// Check reads db's schema version and the binaries it allows, for b. It
// reads goose_db_version and owed_schema_compat, which owed_runtime may
// read; an error reading them is returned as is (see service.Unready).
func Check(ctx context.Context, db *sql.DB, b Build) (Compat, error) {
	c := Compat{Build: b}
	if err := db.QueryRowContext(ctx, qSchemaVersion).
		Scan(&c.Schema); err != nil {
		return c, fmt.Errorf("read the schema version: %w", err)
	}
	var exists bool
	if err := db.QueryRowContext(ctx, qCompatExists).Scan(&exists); err != nil {
		return c, fmt.Errorf("read the schema compatibility: %w", err)
	}
	if !exists {
		// Before migrations/00027 nothing declared a break.
		return c, nil
	}
	if err := db.QueryRowContext(ctx, qCompatRequires).Scan(&c.Requires); err != nil {
		return c, fmt.Errorf("read the schema compatibility: %w", err)
	}
	return c, nil
}

// CheckThis is Check for this binary's Build.
func CheckThis(ctx context.Context, db *sql.DB) (Compat, error) {
	b, err := This()
	if err != nil {
		return Compat{}, err
	}
	return Check(ctx, db, b)
}

// announce records, before they run, the pending contract migrations (those
// with an owed:breaks-before marker): older binaries turn unready before the
// contract lands, never after it, even if the runner dies between applying
// and recording. record removes the rows of any that then did not apply.
func announce(ctx context.Context, db *sql.DB, p *goose.Provider, fsys fs.FS) error {
	var exists bool
	if err := db.QueryRowContext(ctx, qCompatExists).Scan(&exists); err != nil || !exists {
		// A database before migrations/00027 runs no binary that reads it.
		return err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("announce contract migrations: %w", err)
	}
	for _, s := range st {
		if s.State == goose.StateApplied {
			continue
		}
		bb, err := breaksBeforeOf(fsys, s.Source)
		if err != nil || bb == 0 {
			if err != nil {
				return err
			}
			continue
		}
		if _, err := db.ExecContext(ctx, qAnnounceContract, s.Source.Version, bb); err != nil {
			return fmt.Errorf("announce contract migration %05d: %w", s.Source.Version, err)
		}
	}
	return nil
}

// record brings owed_schema_compat in line with goose's table after an up or
// a down: the rows of rolled-back versions go, and every applied migration
// this binary knows gets its row (its breaks_before), so a database migrated
// before the table existed is filled in on the next run. Rows of versions
// this binary does not know (a newer build applied them) are left alone.
func record(ctx context.Context, db *sql.DB, p *goose.Provider, fsys fs.FS) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	defer tx.Rollback()
	var exists bool
	if err := tx.QueryRowContext(ctx, qCompatExists).Scan(&exists); err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	if !exists {
		return nil
	}
	if _, err := tx.ExecContext(ctx, qForgetRolledBack); err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	for _, s := range st {
		if s.State != goose.StateApplied {
			continue
		}
		bb, err := breaksBeforeOf(fsys, s.Source)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qRecordApplied, s.Source.Version, bb); err != nil {
			return fmt.Errorf("record schema compatibility of %05d: %w", s.Source.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record schema compatibility: %w", err)
	}
	return nil
}
