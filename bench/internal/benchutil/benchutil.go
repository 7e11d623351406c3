// Package benchutil holds what owed's benchmark programs share: a fresh
// migrated database on the server the harness started (from testdb, the one
// test-database factory), the program's main, and summary statistics over
// repeated runs (the machine is shared and noisy, so every figure is a
// median with its min and max).
package benchutil

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// DB is a benchmark's own database, made by the one test-database factory
// (testdb.Create): Owner, App and their URLs are testdb's.
type DB struct {
	*testdb.DB
	drop func() error
}

// Close drops the database.
func (d *DB) Close() {
	if err := d.drop(); err != nil {
		fmt.Fprintln(os.Stderr, "benchutil:", err)
	}
}

// NewDB creates a database migrated to head on the server named by
// OWED_BENCH_DATABASE_URL or OWED_TEST_DATABASE_URL (an owner role that may
// CREATE DATABASE; scripts/with-postgres.sh sets the latter).
func NewDB(ctx context.Context) (*DB, error) {
	admin, err := serverURL()
	if err != nil {
		return nil, err
	}
	d, drop, err := testdb.Create(ctx, admin)
	if err != nil {
		return nil, err
	}
	return &DB{DB: d, drop: drop}, nil
}

// serverURL is the owner connection to the benchmark server:
// OWED_BENCH_DATABASE_URL or OWED_TEST_DATABASE_URL.
func serverURL() (string, error) {
	admin := cmp.Or(os.Getenv("OWED_BENCH_DATABASE_URL"), os.Getenv("OWED_TEST_DATABASE_URL"))
	if admin == "" {
		return "", fmt.Errorf("set OWED_BENCH_DATABASE_URL, or run under scripts/with-postgres.sh (make bench does)")
	}
	return admin, nil
}

// Main runs a benchmark program's run and, when it fails, prints the error
// after name ("bench/lag: …") and exits 1.
func Main(name string, run func() error) {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
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

// Row is one line of a results table. Its JSON form is what -json prints
// and what bench/all collects into the combined table.
type Row struct {
	Name   string  `json:"name"`
	Value  Summary `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	// Pass is nil when the figure has no target.
	Pass *bool `json:"pass,omitempty"`
	// System and Column, when set, also place the figure in the comparison
	// of owed with its peer (PrintPeers): the line of the system that ran
	// ("owed rest", "River tuned") and one of the Col* columns.
	System string `json:"system,omitempty"`
	Column string `json:"column,omitempty"`
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

// jsonOut is registered here so every benchmark program gets the same
// -json flag by importing this package.
var jsonOut = flag.Bool("json", false, "print result rows as JSON lines (for bench/all) instead of a table")

// Report prints rows as a table, then the peer comparison of those that
// carry a System, or as JSON lines under -json. Call it after flag.Parse.
func Report(rows []Row) {
	if !*jsonOut {
		Print(rows)
		fmt.Println()
		PrintPeers(rows)
		return
	}
	enc := json.NewEncoder(os.Stdout)
	for _, r := range rows {
		enc.Encode(r)
	}
}

// One is a Summary of a single measurement.
func One(x float64) Summary { return Summary{Median: x, Min: x, Max: x, N: 1} }

// Print writes rows as an aligned table.
func Print(rows []Row) {
	fmt.Printf("%-84s %-40s %-6s %-8s %s\n", "benchmark", "value (median, min, max)", "unit", "target", "verdict")
	for _, r := range rows {
		fmt.Printf("%-84s %-40s %-6s %-8s %s\n", r.Name, r.Value, r.Unit, r.Target, r.Verdict())
	}
}

// Schedule inserts n rows for the ledger, spread round-robin over tenants
// in batches of ledger.MaxScheduleBatch, the i-th due at due(i), each with
// its own recipient and ref. prefix keeps refs of separate runs apart.
func Schedule(ctx context.Context, l *ledger.Ledger, prefix string, n, tenants int, due func(i int) time.Time) error {
	for start, b := 0, 0; start < n; start, b = start+ledger.MaxScheduleBatch, b+1 {
		var batch []ledger.NewNotification
		for i := start; i < min(n, start+ledger.MaxScheduleBatch); i++ {
			batch = append(batch, ledger.NewNotification{Recipient: fmt.Sprintf("r%d", i), Channel: "sms", Kind: "reminder",
				RefID: fmt.Sprintf("%s-%d", prefix, i), DueAt: due(i), Payload: json.RawMessage(`{"text":"hello"}`)})
		}
		if _, err := l.Schedule(ctx, fmt.Sprintf("tenant-%d", b%tenants), batch); err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
	}
	return nil
}

// WaitSettled polls until nothing is owed in the ledger (every row settled),
// and returns when that was first seen. It reads through its own pool, as
// the owner role, so its statements are not counted as the app role's (the
// owner reads every tenant's rows through its own policy, owed_notifications_owner;
// the ledger's Backlog is a function only owed_runtime may run).
func (d *DB) WaitSettled(ctx context.Context, every time.Duration) (time.Time, error) {
	for {
		var owed int64
		err := d.Owner.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications WHERE settled_at IS NULL`).Scan(&owed)
		if err != nil {
			return time.Time{}, err
		}
		if owed == 0 {
			return time.Now(), nil
		}
		if !clock.Sleep(ctx, every) {
			return time.Time{}, ctx.Err()
		}
	}
}

// Outcome summarises the ledger after a run: how many rows were delivered,
// how many are anything else (owed, failed, expired…), and delivered_at −
// due_at over the delivered ones, in seconds.
type Outcome struct {
	Delivered, Other       int64
	LagP50, LagP99, LagMax float64
	LagMin                 float64
}

// Outcome reads the run's Outcome from the ledger.
func (d *DB) Outcome(ctx context.Context) (Outcome, error) {
	var o Outcome
	// The owner reads every tenant's rows: the policies exempt it
	// (owed_notifications_owner, internal/ledger/sql/notifications.sql).
	err := d.Owner.QueryRowContext(ctx, `
			SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state <> 'delivered'),
			       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), 0),
			       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), 0),
			       coalesce(max(lag), 0), coalesce(min(lag), 0)
			FROM (SELECT state, extract(epoch FROM delivered_at - due_at)::float8 AS lag FROM owed_notifications) n`).
		Scan(&o.Delivered, &o.Other, &o.LagP50, &o.LagP99, &o.LagMax, &o.LagMin)
	return o, err
}
