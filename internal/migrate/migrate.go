// Package migrate applies owed's embedded migrations with goose and records,
// per applied migration, which binaries may still run on the schema
// (owed_schema_compat, compat.go). It is the only code that changes the
// schema; services only check that the database's schema is one their
// build runs on (Check), never that it equals their own.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/owedhq/owed/migrations"
)

// Runner migrates with one set of migration files; the package functions use
// the embedded set (migrations.FS).
type Runner struct{ FS fs.FS }

var embedded = Runner{FS: migrations.FS}

func (r Runner) provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, r.FS)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending embedded migration and returns the versions
// applied.
func Up(ctx context.Context, db *sql.DB) ([]int64, error) { return embedded.Up(ctx, db) }

// Down rolls back the most recent migration and returns its version.
func Down(ctx context.Context, db *sql.DB) (int64, error) { return embedded.Down(ctx, db) }

// DownTo rolls back every migration newer than version and returns the
// versions rolled back, newest first.
func DownTo(ctx context.Context, db *sql.DB, version int64) ([]int64, error) {
	return embedded.DownTo(ctx, db, version)
}

// Up applies every pending migration, records their compatibility and
// returns the versions applied.
func (r Runner) Up(ctx context.Context, db *sql.DB) ([]int64, error) {
	p, err := r.provider(db)
	if err != nil {
		return nil, err
	}
	if err := announce(ctx, db, p, r.FS); err != nil {
		return nil, err
	}
	res, err := r.withRetry(ctx, func() ([]*goose.MigrationResult, error) { return p.Up(ctx) })
	// What did apply is recorded even when a later migration failed, and
	// the announcements of what did not are removed.
	if rerr := record(ctx, db, p, r.FS); err == nil && rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	return versions(res), nil
}

// Down rolls back the most recent migration and returns its version.
func (r Runner) Down(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := r.provider(db)
	if err != nil {
		return 0, err
	}
	res, err := r.withRetry(ctx, func() ([]*goose.MigrationResult, error) {
		one, err := p.Down(ctx)
		if err != nil {
			return nil, err
		}
		return []*goose.MigrationResult{one}, nil
	})
	if err != nil {
		return 0, fmt.Errorf("migrate down: %w", err)
	}
	return res[0].Source.Version, record(ctx, db, p, r.FS)
}

// DownTo rolls back every migration newer than version.
func (r Runner) DownTo(ctx context.Context, db *sql.DB, version int64) ([]int64, error) {
	p, err := r.provider(db)
	if err != nil {
		return nil, err
	}
	if cur, err := p.GetDBVersion(ctx); err != nil {
		return nil, fmt.Errorf("migrate down-to: %w", err)
	} else if h, err := Head(r.FS); err != nil {
		return nil, err
	} else if cur > h {
		// goose can only roll back what this binary carries the Down of.
		return nil, fmt.Errorf("migrate down-to %d: the database is at %d, newer than this build's %d: run the down-to with the owedctl of the build that applied %d", version, cur, h, cur)
	}
	res, err := r.withRetry(ctx, func() ([]*goose.MigrationResult, error) { return p.DownTo(ctx, version) })
	if rerr := record(ctx, db, p, r.FS); err == nil && rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, fmt.Errorf("migrate down-to %d: %w", version, err)
	}
	return versions(res), nil
}

func versions(res []*goose.MigrationResult) []int64 {
	out := make([]int64, 0, len(res))
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out
}

// Migration is one migration's state in a database.
type Migration struct {
	Version int64
	Name    string
	Applied bool
	// BreaksBefore is its owed:breaks-before marker (0: none).
	BreaksBefore int64
}

// Status lists every known migration, whether it is applied and the
// binaries it breaks.
func Status(ctx context.Context, db *sql.DB) ([]Migration, error) {
	p, err := embedded.provider(db)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	out := make([]Migration, 0, len(st))
	for _, s := range st {
		bb, err := breaksBeforeOf(embedded.FS, s.Source)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: s.Source.Version, Name: s.Source.Path,
			Applied: s.State == goose.StateApplied, BreaksBefore: bb})
	}
	return out, nil
}

func breaksBeforeOf(fsys fs.FS, s *goose.Source) (int64, error) {
	text, err := fs.ReadFile(fsys, s.Path)
	if err != nil {
		return 0, fmt.Errorf("read migration %05d: %w", s.Version, err)
	}
	return BreaksBefore(s.Version, string(text))
}

// AtHead reports the database's version and this build's newest. It reads
// the goose version table, which the application role may not be allowed
// to read; such an error is returned as is. Readiness uses Check instead.
func AtHead(ctx context.Context, db *sql.DB) (current, target int64, err error) {
	p, err := embedded.provider(db)
	if err != nil {
		return 0, 0, err
	}
	return p.GetVersions(ctx)
}
