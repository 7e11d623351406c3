// Package migrate applies owed's embedded migrations with goose. It is the
// only code that changes the schema; services only check that the database is
// at the head version (see AtHead).
package migrate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"github.com/owedhq/owed/migrations"
)

func provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration and returns the versions applied.
func Up(ctx context.Context, db *sql.DB) ([]int64, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate up: %w", err)
	}
	versions := make([]int64, 0, len(res))
	for _, r := range res {
		versions = append(versions, r.Source.Version)
	}
	return versions, nil
}

// Down rolls back the most recent migration and returns its version.
func Down(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	res, err := p.Down(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate down: %w", err)
	}
	return res.Source.Version, nil
}

// Migration is one migration's state in a database.
type Migration struct {
	Version int64
	Name    string
	Applied bool
}

// Status lists every known migration and whether it is applied.
func Status(ctx context.Context, db *sql.DB) ([]Migration, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	out := make([]Migration, 0, len(st))
	for _, s := range st {
		out = append(out, Migration{
			Version: s.Source.Version,
			Name:    s.Source.Path,
			Applied: s.State == goose.StateApplied,
		})
	}
	return out, nil
}

// AtHead reports whether every embedded migration is applied. It reads the
// goose version table, which the application role may not be allowed to
// read; such an error is returned as is.
func AtHead(ctx context.Context, db *sql.DB) (current, target int64, err error) {
	p, err := provider(db)
	if err != nil {
		return 0, 0, err
	}
	return p.GetVersions(ctx)
}
