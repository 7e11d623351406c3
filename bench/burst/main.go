// Command burst measures a burst drained under the cron owed is deployed
// with (issue 15, benchmark 1): N rows fall due at one instant (an event
// fanned out to every subscriber), the provider unthrottled, the real
// bin/sweeper and bin/worker processes of bench/e2e (bench/internal/stack),
// and the cron called strictly once a minute, never back to back. It times
// the first sweep → every row delivered, and reports deliveries per second,
// the sweeps that published, and the first sweep's slices, publishes and
// duration.
//
// The target is the issue's: drained within one cron interval of the first
// sweep plus N ÷ the back-to-back throughput, which the program measures
// first on a fresh database and stack of the same shape, the cron called
// back to back as bench/e2e does (-compare=false skips it and takes
// -back-to-back instead).
//
//	make build && scripts/with-postgres.sh go run ./bench/burst
//	make build && scripts/with-postgres.sh go run ./bench/burst -rows 20000 -compare=false -back-to-back 2766
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/sweep"
)

const tenants = 20

type opts struct {
	rows, workers, concurrency int
	cron                       time.Duration
	bin, queue                 string
}

// drained is one drain's figures.
type drained struct {
	took time.Duration
	// sweeps are the results of the sweeps that published something.
	sweeps []sweep.Result
	out    benchutil.Outcome
	dups   int64
}

func main() { benchutil.Main("bench/burst", run) }

func run() error {
	var o opts
	flag.IntVar(&o.rows, "rows", 100000, "rows falling due at one instant")
	flag.IntVar(&o.workers, "workers", 2, "worker processes")
	flag.IntVar(&o.concurrency, "concurrency", 32, "sends in flight per worker (OWED_WORKER_CONCURRENCY)")
	flag.DurationVar(&o.cron, "cron", time.Minute, "how often the cron calls the sweeper (the hosted cron's minute)")
	flag.StringVar(&o.bin, "bin", "bin", "folder holding the sweeper and worker binaries")
	flag.StringVar(&o.queue, "queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", "))
	compare := flag.Bool("compare", true, "measure the back-to-back throughput first, on a fresh database and stack")
	given := flag.Float64("back-to-back", 0, "the back-to-back throughput (deliveries/s) to set the target by, with -compare=false")
	flag.Parse()
	if !*compare && *given <= 0 {
		return fmt.Errorf("-compare=false needs -back-to-back, the deliveries/s the target is set by")
	}
	if err := stack.CheckQueue(o.queue); err != nil {
		return err
	}
	ctx := context.Background()
	backToBack := *given
	if *compare {
		d, err := once(ctx, o, 0)
		if err != nil {
			return err
		}
		backToBack = float64(o.rows) / d.took.Seconds()
		fmt.Fprintf(os.Stderr, "bench/burst: back to back: %d rows in %.1fs, %.0f deliveries/s\n", o.rows, d.took.Seconds(), backToBack)
	}
	d, err := once(ctx, o, o.cron)
	if err != nil {
		return err
	}
	benchutil.Report(report(o, d, backToBack, *compare))
	return nil
}

func report(o opts, d drained, backToBack float64, measured bool) []benchutil.Row {
	target := o.cron.Seconds() + float64(o.rows)/backToBack
	label := fmt.Sprintf("%d rows due at once, cron every %s, %s, %d workers × %d", o.rows, o.cron, o.queue, o.workers, o.concurrency)
	source := "given"
	if measured {
		source = "measured first"
	}
	first := d.sweeps[0]
	return []benchutil.Row{
		{Name: "burst: first sweep → all delivered, " + label, Value: benchutil.One(d.took.Seconds()), Unit: "s",
			Target: fmt.Sprintf("≤ %.0f", target), Pass: benchutil.Check(d.took.Seconds() <= target)},
		{Name: fmt.Sprintf("burst: deliveries/s, cron every %s", o.cron), Value: benchutil.One(float64(o.rows) / d.took.Seconds()), Unit: "/s"},
		{Name: fmt.Sprintf("burst: back-to-back deliveries/s (%s), the target's N ÷ rate", source), Value: benchutil.One(backToBack), Unit: "/s"},
		{Name: "burst: sweeps that published", Value: benchutil.One(float64(len(d.sweeps))), Unit: "sweeps"},
		{Name: fmt.Sprintf("burst: first sweep published (%d slices, held back: %q)", first.Slices, first.HeldBack),
			Value: benchutil.One(float64(first.Published)), Unit: "rows"},
		{Name: "burst: first sweep's duration", Value: benchutil.One(float64(first.DurationMS) / 1000), Unit: "s"},
		{Name: "burst: lag (delivered − due) p50 / p99", Value: benchutil.Summary{Median: d.out.LagP50, Min: d.out.LagP50, Max: d.out.LagP99, N: 1}, Unit: "s"},
		{Name: "burst: rows not delivered + duplicate sends", Value: benchutil.One(float64(d.out.Other + d.dups)), Unit: "rows",
			Target: "0", Pass: benchutil.Check(d.out.Other+d.dups == 0)},
	}
}

// once schedules the burst on a fresh database and stack, plays the cron
// every cron (0: back to back, as bench/e2e does: again at once while a
// sweep leases, then once a second) from the first sweep until every row
// was delivered, and times it.
func once(ctx context.Context, o opts, cron time.Duration) (drained, error) {
	var d drained
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return d, err
	}
	defer db.Close()
	fmt.Fprintf(os.Stderr, "bench/burst: scheduling %d rows…\n", o.rows)
	due := time.Now().Add(-time.Second)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "burst", o.rows, tenants, func(int) time.Time { return due }); err != nil {
		return d, err
	}
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: o.bin, Queue: o.queue, Workers: o.workers, Concurrency: o.concurrency,
		SandboxRate: "1000000/s", SandboxBurst: 1000000, MaxSends: o.rows + 1000, SweepBatch: sweep.BatchDefault,
		PublishAhead: sweep.PublishAheadDefault})
	if err != nil {
		return d, err
	}
	defer st.Stop()

	cronCtx, stopCron := context.WithCancel(ctx)
	defer stopCron()
	var sweeps []sweep.Result
	done := make(chan struct{})
	start := time.Now()
	go func() { sweeps = playCron(cronCtx, st, cron, start); close(done) }()
	deadline, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	for st.Sandbox.Stats().DistinctKeys < int64(o.rows) {
		if !clock.Sleep(deadline, 20*time.Millisecond) {
			return d, fmt.Errorf("%d of %d rows reached the sandbox within 20 minutes", st.Sandbox.Stats().DistinctKeys, o.rows)
		}
	}
	end, err := db.WaitSettled(deadline, 20*time.Millisecond)
	stopCron()
	<-done
	if err != nil {
		return d, err
	}
	d.took, d.sweeps = end.Sub(start), sweeps
	if len(d.sweeps) == 0 {
		return d, fmt.Errorf("every row delivered, yet no sweep reported a publish")
	}
	d.dups = st.Sandbox.Stats().Duplicates
	d.out, err = db.Outcome(ctx)
	return d, err
}

// playCron calls the sweeper at start, start+cron, start+2·cron, …, however
// long each sweep took, until ctx ends, and returns the sweeps that
// published. cron 0 is back to back.
func playCron(ctx context.Context, st *stack.Stack, cron time.Duration, start time.Time) (published []sweep.Result) {
	next := start
	for {
		r, err := st.Sweep(ctx)
		if ctx.Err() != nil {
			return published
		}
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "bench/burst: sweep:", err)
		case r.Published > 0:
			fmt.Fprintf(os.Stderr, "bench/burst: sweep at +%.1fs: %d slices, %d published, %d outstanding before, held back %q, %d ms\n",
				time.Since(start).Seconds(), r.Slices, r.Published, r.Outstanding, r.HeldBack, r.DurationMS)
			published = append(published, r)
		}
		switch {
		case cron > 0:
			next = next.Add(cron)
		case r.Leased == 0:
			next = time.Now().Add(time.Second)
		default:
			next = time.Now()
		}
		if !clock.Sleep(ctx, time.Until(next)) {
			return published
		}
	}
}
