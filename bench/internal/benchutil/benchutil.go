// Package benchutil holds what owed's benchmark programs share: a fresh
// migrated database on the server the harness started, and summary
// statistics over repeated runs (the machine is shared and noisy, so every
// figure is a median with its min and max).
package benchutil

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"slices"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/migrate"
)

// DB is a benchmark's own database.
type DB struct {
	Owner, App       *sql.DB
	OwnerURL, AppURL string
	drop             func()
}

// Close drops the database.
func (d *DB) Close() {
	d.Owner.Close()
	d.App.Close()
	d.drop()
}

// NewDB creates and migrates a database on the server named by
// OWED_BENCH_DATABASE_URL or OWED_TEST_DATABASE_URL (an owner role that may
// CREATE DATABASE; scripts/with-postgres.sh sets the latter).
func NewDB(ctx context.Context) (*DB, error) {
	admin := os.Getenv("OWED_BENCH_DATABASE_URL")
	if admin == "" {
		admin = os.Getenv("OWED_TEST_DATABASE_URL")
	}
	if admin == "" {
		return nil, fmt.Errorf("set OWED_BENCH_DATABASE_URL, or run under scripts/with-postgres.sh (make bench does)")
	}
	adm, err := sql.Open("postgres", admin)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "owed_bench_" + hex.EncodeToString(b)
	if _, err := adm.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		adm.Close()
		return nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	d := &DB{OwnerURL: u.String(), drop: func() {
		adm.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		adm.Close()
	}}
	app := os.Getenv("OWED_TEST_APP_USER")
	if app == "" {
		app = "owed_app"
	}
	u.User = url.User(app)
	d.AppURL = u.String()
	if d.Owner, err = sql.Open("postgres", d.OwnerURL); err != nil {
		return nil, err
	}
	if _, err := migrate.Up(ctx, d.Owner); err != nil {
		d.drop()
		return nil, err
	}
	if d.App, err = sql.Open("postgres", d.AppURL); err != nil {
		return nil, err
	}
	return d, nil
}

// Summary is a median with its spread.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// Summarise returns the median, min and max of xs.
func Summarise(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// String prints "median (min–max, n=N)" with the given precision.
func (s Summary) String() string {
	return fmt.Sprintf("%.2f (min %.2f, max %.2f, n=%d)", s.Median, s.Min, s.Max, s.N)
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Row is one line of a results table.
type Row struct {
	Name   string
	Value  Summary
	Unit   string
	Target string
	// Pass is nil when the figure has no target.
	Pass *bool
}

// Verdict returns pass/short/"-".
func (r Row) Verdict() string {
	switch {
	case r.Pass == nil:
		return "-"
	case *r.Pass:
		return "pass"
	}
	return "short"
}

// Check returns a *bool for Row.Pass.
func Check(ok bool) *bool { return &ok }

// Print writes rows as an aligned table.
func Print(rows []Row) {
	fmt.Printf("%-72s %-40s %-6s %-8s %s\n", "benchmark", "value (median, min, max)", "unit", "target", "verdict")
	for _, r := range rows {
		fmt.Printf("%-72s %-40s %-6s %-8s %s\n", r.Name, r.Value, r.Unit, r.Target, r.Verdict())
	}
}
