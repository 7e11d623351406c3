// Command lag measures how late rows coming due are delivered when the cron
// calls the sweeper once a minute: N rows due evenly over the next window,
// the real bin/sweeper (OWED_PUBLISH_AHEAD=60s: rows due before the next
// sweep are published with a whole-second delay) and bin/worker processes
// (which send a message up to 1 s before its due time), the provider
// unthrottled. It reports p50 and p99 of delivered_at − due_at from the
// ledger. It runs in real time: the window plus a few seconds.
//
//	make build && scripts/with-postgres.sh go run ./bench/lag
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/ledger"
)

// The peer: River's p99 for jobs coming due on this machine kind.
const (
	riverDefaultP99 = 2.3
	riverTunedP99   = 0.1
	targetP99       = 1.0
)

func main() { benchutil.Main("bench/lag", run) }

func run() error {
	rows := flag.Int("rows", 1000, "rows due over the window")
	window := flag.Duration("window", 2*time.Minute, "rows fall due evenly over this window, starting now")
	cron := flag.Duration("cron", time.Minute, "how often the sweeper is called")
	workers := flag.Int("workers", 2, "worker processes")
	concurrency := flag.Int("concurrency", 16, "OWED_WORKER_CONCURRENCY")
	bin := flag.String("bin", "bin", "folder holding the sweeper and worker binaries")
	flag.Parse()
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: *bin, Workers: *workers, Concurrency: *concurrency,
		SandboxRate: "1000000/s", SandboxBurst: 1000000, MaxSends: *rows + 1000, SweepBatch: 500, PublishAhead: time.Minute})
	if err != nil {
		return err
	}
	defer st.Stop()

	start := time.Now()
	// The first row is due a second from now, so none is overdue when it
	// is scheduled.
	step := *window / time.Duration(*rows)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "lag", *rows, 20, func(i int) time.Time {
		return start.Add(time.Second + time.Duration(i)*step)
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench/lag: %d rows due over %s, sweeps every %s…\n", *rows, *window, *cron)
	for k := 0; time.Duration(k)**cron <= *window+time.Second; k++ {
		if wait := time.Until(start.Add(time.Duration(k) * *cron)); wait > 0 {
			time.Sleep(wait)
		}
		res, err := st.Sweep(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench/lag: sweep at +%.0fs published %d\n", time.Since(start).Seconds(), res.Published)
	}
	settleCtx, cancel := context.WithTimeout(ctx, *cron+time.Minute)
	defer cancel()
	if _, err := db.WaitSettled(settleCtx, 100*time.Millisecond); err != nil {
		return fmt.Errorf("rows still owed a minute after the last sweep: %w", err)
	}
	out, err := db.Outcome(ctx)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("%d rows due over %s, sweep every %s", *rows, *window, *cron)
	benchutil.Report([]benchutil.Row{
		{Name: "lag (delivered − due) p50, " + label, Value: benchutil.One(out.LagP50), Unit: "s"},
		{Name: fmt.Sprintf("lag p99 (River %.1f s default, %.1f s tuned)", riverDefaultP99, riverTunedP99),
			Value: benchutil.One(out.LagP99), Unit: "s", Target: fmt.Sprintf("≤ %.0f", targetP99), Pass: benchutil.Check(out.LagP99 <= targetP99)},
		{Name: "lag min (early by up to the 1 s tolerance) / max", Value: benchutil.Summary{Median: out.LagMax, Min: out.LagMin, Max: out.LagMax, N: 1}, Unit: "s"},
		{Name: "lag run: rows not delivered", Value: benchutil.One(float64(out.Other)), Unit: "rows", Target: "0", Pass: benchutil.Check(out.Other == 0)},
	})
	return nil
}
