// Command recovery measures the drain after the cron stopped: 70 minutes of
// the design's 12,000-a-day follow-up workload (≈ 583 rows) fell due while no
// sweep ran; then sweeps resume, every scaled minute. On the scaled clock of
// bench/limited (the 40/minute provider as 40/s, a minute as a second) it
// times first sweep → every row delivered against the floor, backlog ÷
// provider rate, and counts duplicates (sandbox) and rows not delivered
// (ledger). Real bin/sweeper and four bin/worker processes.
//
//	make build && scripts/with-postgres.sh go run ./bench/recovery
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
	"github.com/owedhq/owed/internal/provider/sandbox"
)

const (
	perDay = 12000
	rate   = 40 // per scaled minute, i.e. per wall second
)

func main() { benchutil.Main("bench/recovery", run) }

func run() error {
	outage := flag.Duration("outage", 70*time.Minute, "how long no sweep ran (real-world minutes)")
	runs := flag.Int("runs", 3, "repetitions, each on a fresh database and stack")
	workers := flag.Int("workers", 4, "worker processes")
	concurrency := flag.Int("concurrency", 16, "OWED_WORKER_CONCURRENCY")
	bin := flag.String("bin", "bin", "folder holding the sweeper and worker binaries")
	flag.Parse()
	ctx := context.Background()
	n := int(float64(perDay) * outage.Hours() / 24)
	floor := float64(n) / rate
	var ratios, secs []float64
	var dups, lost int64
	for r := 0; r < *runs; r++ {
		took, d, l, err := once(ctx, n, *outage, *workers, *concurrency, *bin)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench/recovery: run %d: %d rows in %.2fs (floor %.2fs)\n", r+1, n, took, floor)
		secs, ratios = append(secs, took), append(ratios, took/floor)
		dups, lost = dups+d, lost+l
	}
	rs := benchutil.Summarise(ratios)
	benchutil.Report([]benchutil.Row{
		{Name: fmt.Sprintf("recovery: %d rows (%s outage) drained, 40/s scaled", n, *outage), Value: benchutil.Summarise(secs), Unit: "s"},
		{Name: fmt.Sprintf("recovery: drain time ÷ floor (%.2f s = backlog ÷ rate)", floor), Value: rs, Unit: "×",
			Target: "≤ 1.05", Pass: benchutil.Check(rs.Median <= 1.05)},
		{Name: "recovery: duplicates + lost rows, all runs", Value: benchutil.One(float64(dups + lost)), Unit: "rows",
			Target: "0", Pass: benchutil.Check(dups+lost == 0)},
	})
	return nil
}

// once returns the drain time in seconds, duplicates and rows not delivered.
func once(ctx context.Context, n int, outage time.Duration, workers, concurrency int, bin string) (float64, int64, int64, error) {
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	defer db.Close()
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: bin, Workers: workers, Concurrency: concurrency,
		ProviderRate: fmt.Sprintf("%d/s", rate), SandboxRate: fmt.Sprintf("%d/s", rate), SandboxBurst: sandbox.DefaultBurst,
		MaxSends: n + 1000, SweepBatch: 500, PublishAhead: time.Minute})
	if err != nil {
		return 0, 0, 0, err
	}
	defer st.Stop()
	// The rows fell due evenly over the outage, which ended now. They are
	// scheduled after the start, so the start-up checks (each process's
	// /healthz, the sweeper's /readyz) see an empty ledger.
	now := time.Now()
	step := outage / time.Duration(n)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "rec", n, 20, func(i int) time.Time {
		return now.Add(-outage + time.Duration(i)*step)
	}); err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	done := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		t, err := db.WaitSettled(ctx, 20*time.Millisecond)
		if err != nil {
			errc <- err
			return
		}
		done <- t
	}()
	// Sweeps resume, one per scaled minute, until everything is settled.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var end time.Time
	for end.IsZero() {
		if _, err := st.Sweep(ctx); err != nil {
			return 0, 0, 0, err
		}
		select {
		case end = <-done:
		case err := <-errc:
			return 0, 0, 0, err
		case <-tick.C:
		}
	}
	out, err := db.Outcome(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return end.Sub(start).Seconds(), st.Sandbox.Stats().Duplicates, int64(n) - out.Delivered, nil
}
