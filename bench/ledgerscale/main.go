// Command ledgerscale measures what a large ledger costs the hot path and
// the operators' reads (issue 28): at each size (default 1,000,000 and
// 20,000,000 settled rows spread over the 12 months before now, generated
// by the server and inserted as the owner (addSettled), each delivered row
// with its accepted attempt, plus 100,000 rows owed in a day) it times
//
//   - an idle sweep (nothing due: expire, survey, lease, into the queue
//     emulator),
//   - a 500-row lease (1,000 owed rows made due, leased 500 at a time),
//   - the worker's claim and settle of those 1,000 rows (one batch each),
//     and of 1,000 more with the per-minute counters' triggers disabled,
//     whose difference is what the counters cost a settle,
//   - owedctl stats (ops.ReadHealth over the last hour and the last day),
//   - the console dashboard's reads (ReadHealth and the sends per minute),
//   - GET /v1/notifications' first page (ledger.FindPage, 50 rows),
//
// and counts the sequential scans of the ledger's tables the measured
// statements made (pg_stat_user_tables.seq_scan of a table or partition
// holding a page; target 0), then each of the idle sweep's statements and
// the operators' reads one by one. Targets: every figure at the largest
// size within 1.5× of the smallest. The settled rows fill twelve month
// partitions; retention then drops the oldest (owedctl retention run:
// archive, check, detach, drop), and the archive's throughput and the
// drop's time after it are printed (target ≤ 1 s).
//
//	scripts/with-postgres.sh go run ./bench/ledgerscale [-sizes 1000000,20000000] [-runs 5] [-keep]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/archive"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	tenants  = 50
	owedRows = 100000
	// owedIn is when the owed rows fall due, from their scheduling.
	owedIn     = 24 * time.Hour
	queueToken = "bench-queue-token-0123456789"
	batch      = 1000
)

func main() { benchutil.Main("bench/ledgerscale", run) }

func run() error {
	sizesFlag := flag.String("sizes", "1000000,20000000", "settled ledger sizes to measure at, ascending")
	runs := flag.Int("runs", 5, "repetitions of each measurement per size")
	warmCalls := flag.Int("warm", 5, "calls of each read and of the idle sweep on the same pool before its warm timing "+
		"(the services' pools keep their sessions and the sessions their plans); 0: no warm timings")
	keep := flag.Bool("keep", false, "keep the built ledger's database at the end (its URL is printed) to look into it; "+
		"run against a server that outlives the run (OWED_BENCH_DATABASE_URL) and drop it yourself")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			return fmt.Errorf("-sizes: %q is not an ascending list of row counts", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	if *keep {
		defer fmt.Fprintf(os.Stderr, "bench/ledgerscale: the ledger is kept: %s\n", db.OwnerURL)
	} else {
		defer db.Close()
	}
	// The services open their pools without JIT and constraint exclusion
	// (service.SessionSettings); the bench's database gives its own pools
	// the same.
	for _, set := range []string{"jit = off", "constraint_exclusion = off"} {
		if _, err := db.Owner.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(db.Name)+" SET "+set); err != nil {
			return err
		}
	}
	db.FlushApp()
	db.Owner.SetMaxIdleConns(0)
	db.Owner.SetMaxIdleConns(2)
	l := ledger.New(db.App, nil)

	ecfg := emulator.DefaultConfig()
	ecfg.Token, ecfg.DatabaseURL = queueToken, db.OwnerURL
	em, err := emulator.Open(ctx, ecfg, zerolog.Nop())
	if err != nil {
		return err
	}
	em.Start(ctx)
	srv := httptest.NewServer(em)
	defer func() { em.Drain(); srv.Close(); em.Stop() }()
	q, err := rest.New(rest.Config{URL: srv.URL, Token: queueToken, Name: "bench"})
	if err != nil {
		return err
	}
	sw, err := sweep.New(l, q, sweep.Config{Batch: 500, Budget: 50 * time.Second, PublishAhead: time.Minute,
		RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		return err
	}

	// This month's partitions and the next thirteen: the owed rows are
	// this month's, the settled rows' twelve months follow (addSettled).
	if _, err := db.Owner.ExecContext(ctx, `SELECT owed_ledger_partitions_ensure(now(), 13)`); err != nil {
		return err
	}
	walStart, err := walLSN(ctx, db)
	if err != nil {
		return err
	}
	if err := addOwed(ctx, l); err != nil {
		return err
	}
	walOwed, err := walLSN(ctx, db)
	if err != nil {
		return err
	}
	type figures map[string]benchutil.Summary
	rowsWAL := benchutil.Row{Name: fmt.Sprintf("WAL per row scheduled (%d rows through ledger.Schedule, 1,000 a batch)", owedRows),
		Value: benchutil.One(float64(walOwed-walStart) / owedRows), Unit: "bytes"}
	at := map[int]figures{}
	rows := []benchutil.Row{rowsWAL}
	have := 0
	for _, size := range sizes {
		fmt.Fprintf(os.Stderr, "bench/ledgerscale: growing the ledger to %d settled rows…\n", size)
		start := time.Now()
		added, err := addSettled(ctx, db, have, size)
		if err != nil {
			return err
		}
		load := time.Since(start)
		have = size
		var bytes int64
		if err := db.Owner.QueryRowContext(ctx, `SELECT ((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('owed_notifications'))
		    + (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('owed_notification_attempts')))::bigint`).Scan(&bytes); err != nil {
			return err
		}
		rows = append(rows,
			benchutil.Row{Name: fmt.Sprintf("load to %d settled rows with their attempts (INSERT … SELECT, indexes, VACUUM ANALYZE)", size),
				Value: benchutil.One(load.Seconds()), Unit: "s"},
			benchutil.Row{Name: fmt.Sprintf("  the load's speed, %d ledger rows added with their attempts", added),
				Value: benchutil.One(float64(added) / load.Seconds()), Unit: "rows/s"},
			benchutil.Row{Name: fmt.Sprintf("ledger and attempts with indexes at %d settled rows", size),
				Value: benchutil.One(float64(bytes) / (1 << 20)), Unit: "MiB"})

		f := figures{}
		samples := map[string][]float64{}
		scans := map[string]int64{}
		scannedBy := map[string]map[string]int64{}
		time1 := func(name string, fn func() error) error {
			before, err := seqScans(ctx, db)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := fn(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			samples[name] = append(samples[name], benchutil.Ms(time.Since(t0)))
			// The same again on the pool's sessions, which now hold
			// the plans: what a service that keeps its pool pays. The
			// calls count in the sequential scans too.
			if warmable[name] && *warmCalls > 0 {
				for i := 0; i < *warmCalls; i++ {
					if err := fn(); err != nil {
						return fmt.Errorf("%s, warming: %w", name, err)
					}
				}
				t0 := time.Now()
				if err := fn(); err != nil {
					return fmt.Errorf("%s, warm: %w", name, err)
				}
				samples[name+warmSuffix] = append(samples[name+warmSuffix], benchutil.Ms(time.Since(t0)))
			}
			after, err := seqScans(ctx, db)
			if err != nil {
				return err
			}
			if scannedBy[name] == nil {
				scannedBy[name] = map[string]int64{}
			}
			scans[name] += after.since(before, scannedBy[name])
			return nil
		}
		// The rows the runs at the smaller size delivered would still be
		// inside the last hour's window, so the hour's reads at this size
		// would count both sizes' traffic; they are moved two days back,
		// out of the hour's and the day's windows.
		if err := ageDelivered(ctx, db); err != nil {
			return err
		}
		walBefore, err := walLSN(ctx, db)
		if err != nil {
			return err
		}
		for i := 0; i < *runs; i++ {
			if err := makeDue(ctx, db, batch); err != nil {
				return err
			}
			var leased []ledger.Leased
			if err := time1("lease of 500 due rows", func() error {
				got, err := l.Lease(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute})
				leased = append(leased, got...)
				return err
			}); err != nil {
				return err
			}
			got, err := l.Lease(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute})
			if err != nil {
				return err
			}
			if leased = append(leased, got...); len(leased) != batch {
				return fmt.Errorf("leased %d rows, want %d", len(leased), batch)
			}
			if err := time1("claim + settle of 1,000 rows", func() error { return claimSettle(ctx, l, leased) }); err != nil {
				return err
			}
			// The same without the per-minute counters' triggers
			// (internal/ledger/sql/minutes.sql), so the difference is what
			// the counters cost the settle.
			if leased, err = leaseDue(ctx, db, l); err != nil {
				return err
			}
			if err := counters(ctx, db, false); err != nil {
				return err
			}
			err = time1(withoutCounters, func() error { return claimSettle(ctx, l, leased) })
			if cerr := counters(ctx, db, true); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := time1("idle sweep (nothing due)", func() error {
				res, err := sw.Run(ctx)
				if err == nil && res.Published != 0 {
					err = fmt.Errorf("published %d rows", res.Published)
				}
				return err
			}); err != nil {
				return err
			}
			now := time.Now()
			if err := time1("owedctl stats (ReadHealth, last hour)", func() error {
				_, err := ops.ReadHealth(ctx, l, now, time.Hour)
				return err
			}); err != nil {
				return err
			}
			if err := time1("owedctl stats --since 24h (ReadHealth, last day)", func() error {
				_, err := ops.ReadHealth(ctx, l, now, 24*time.Hour)
				return err
			}); err != nil {
				return err
			}
			if err := time1("console dashboard (ReadHealth + sends per minute)", func() error {
				if _, err := ops.ReadHealth(ctx, l, now, time.Hour); err != nil {
					return err
				}
				_, err := l.SendsPerMinute(ctx, now.Add(-time.Hour).Truncate(time.Minute))
				return err
			}); err != nil {
				return err
			}
			// ReadHealth's and the dashboard's reads one by one, so a ratio
			// names the read that grew.
			reads := l.ReadsRole()
			for _, part := range []struct {
				name string
				fn   func() error
			}{
				{partStatsDay, func() error { _, err := reads.Stats(ctx, now.Add(-24*time.Hour)); return err }},
				{partReceiptsHour, func() error { _, err := reads.ReceiptStats(ctx, now.Add(-time.Hour)); return err }},
				{partReceiptsDay, func() error { _, err := reads.ReceiptStats(ctx, now.Add(-24*time.Hour)); return err }},
				{partBacklog, func() error { _, err := reads.Backlog(ctx); return err }},
				{partSends, func() error {
					_, err := reads.SendsPerMinute(ctx, now.Add(-time.Hour).Truncate(time.Minute))
					return err
				}},
			} {
				if err := time1(part.name, part.fn); err != nil {
					return err
				}
			}
			if err := time1("GET /v1/notifications first page (50 rows)", func() error {
				page, _, err := l.FindPage(ctx, "tenant-3", ledger.Filter{Limit: 50}, nil)
				if err == nil && len(page) != 50 {
					err = fmt.Errorf("first page has %d rows", len(page))
				}
				return err
			}); err != nil {
				return err
			}
		}
		walAfter, err := walLSN(ctx, db)
		if err != nil {
			return err
		}
		// Each run delivers two batches: one with the per-minute counters
		// and one without.
		delivered := float64(*runs * 2 * batch)
		rows = append(rows, benchutil.Row{Name: fmt.Sprintf("WAL per delivered row (made due, leased, claimed, settled, with its attempt), %d settled", size),
			Value: benchutil.One(float64(walAfter-walBefore) / delivered), Unit: "bytes"})
		// The idle sweep's statements one by one (with nothing due), and
		// the operators' reads, each with its own count of sequential
		// scans: the idle sweep's total above says whether, this says
		// which.
		stmtRows, err := statementScans(ctx, db, l, size)
		if err != nil {
			return err
		}
		rows = append(rows, stmtRows...)
		if scans["lease of 500 due rows"] > 0 {
			if err := explainLease(ctx, db, l); err != nil {
				return err
			}
		}
		for _, name := range measured {
			if len(samples[name]) == 0 {
				continue
			}
			f[name] = benchutil.Summarise(samples[name])
			rows = append(rows, benchutil.Row{Name: fmt.Sprintf("%s, %d settled + %d owed", name, size, owedRows),
				Value: f[name], Unit: "ms"})
			if strings.HasSuffix(name, warmSuffix) {
				continue // its calls are counted with its cold one's
			}
			label := fmt.Sprintf("  its sequential scans of a ledger table, %d runs", *runs)
			if warmable[name] && *warmCalls > 0 {
				label = fmt.Sprintf("  its sequential scans of a ledger table, %d runs of %d calls (cold and warm)", *runs, *warmCalls+2)
			}
			rows = append(rows, benchutil.Row{Name: label + scannedTables(scannedBy[name]),
				Value: benchutil.One(float64(scans[name])), Unit: "scans", Target: "0", Pass: benchutil.Check(scans[name] == 0)})
		}
		at[size] = f
	}
	for _, size := range sizes {
		with, without := at[size]["claim + settle of 1,000 rows"].Median, at[size][withoutCounters].Median
		rows = append(rows, benchutil.Row{Name: fmt.Sprintf("what the per-minute counters cost a settle of 1,000 rows (median with − without), %d settled", size),
			Value: benchutil.One(with - without), Unit: "ms"})
	}
	if len(sizes) > 1 {
		lo, hi := sizes[0], sizes[len(sizes)-1]
		for _, name := range measured {
			if at[lo][name].Median == 0 {
				continue
			}
			ratio := at[hi][name].Median / at[lo][name].Median
			rows = append(rows, benchutil.Row{Name: fmt.Sprintf("%s, %d ÷ %d", name, hi, lo), Value: benchutil.One(ratio),
				Unit: "×", Target: "≤ 1.5", Pass: benchutil.Check(ratio <= 1.5)})
		}
	}
	// Retention of the oldest month of the largest ledger: its archive's
	// throughput, and the drop after it.
	drop, err := dropMonth(ctx, db)
	if err != nil {
		return err
	}
	rows = append(rows, drop...)
	// The machine's load beside the figures: a figure taken on a loaded
	// machine says little about the ledger.
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			if load, err := strconv.ParseFloat(f[2], 64); err == nil {
				rows = append(rows, benchutil.Row{Name: "load average over the last 15 minutes while measuring",
					Value: benchutil.One(load), Unit: "load"})
			}
		}
	}
	benchutil.Report(rows)
	return nil
}

// withoutCounters names the settle timed with the per-minute counters'
// triggers disabled.
const withoutCounters = "claim + settle of 1,000 rows, per-minute counters off"

// The parts of ReadHealth and of the dashboard, each timed alone.
const (
	partStatsDay     = "  delivery stats, last day (Stats: owed_ledger_stats)"
	partReceiptsHour = "  receipt stats, last hour (ReceiptStats: owed_ledger_receipt_stats)"
	partReceiptsDay  = "  receipt stats, last day (ReceiptStats: owed_ledger_receipt_stats)"
	partBacklog      = "  backlog (Backlog: owed_ledger_backlog)"
	partSends        = "  sends per minute, last hour (SendsPerMinute: owed_ledger_sends_per_minute)"
)

// cold are the timed operations, in the order they are printed, each
// timed in sessions the bench's count of sequential scans has just
// opened: every statement is planned afresh.
var cold = []string{"idle sweep (nothing due)", "lease of 500 due rows", "claim + settle of 1,000 rows",
	withoutCounters, "owedctl stats (ReadHealth, last hour)", "owedctl stats --since 24h (ReadHealth, last day)",
	partStatsDay, partReceiptsHour, partReceiptsDay, partBacklog,
	"console dashboard (ReadHealth + sends per minute)", partSends, "GET /v1/notifications first page (50 rows)"}

// warmable are the operations that change nothing, so they are timed a
// second time after -warm calls on the same sessions (warmSuffix).
var warmable = map[string]bool{"idle sweep (nothing due)": true, "owedctl stats (ReadHealth, last hour)": true,
	"owedctl stats --since 24h (ReadHealth, last day)": true, partStatsDay: true, partReceiptsHour: true,
	partReceiptsDay: true, partBacklog: true, "console dashboard (ReadHealth + sends per minute)": true, partSends: true,
	"GET /v1/notifications first page (50 rows)": true}

const warmSuffix = ", warm"

// measured are cold, each warmable one followed by its warm timing.
var measured = func() []string {
	var out []string
	for _, name := range cold {
		out = append(out, name)
		if warmable[name] {
			out = append(out, name+warmSuffix)
		}
	}
	return out
}()

// leaseDue makes 1,000 owed rows due and leases them, 500 at a time.
func leaseDue(ctx context.Context, db *benchutil.DB, l *ledger.Ledger) ([]ledger.Leased, error) {
	if err := makeDue(ctx, db, batch); err != nil {
		return nil, err
	}
	var leased []ledger.Leased
	for len(leased) < batch {
		got, err := l.Lease(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute})
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("leased %d rows, want %d", len(leased), batch)
		}
		leased = append(leased, got...)
	}
	return leased, nil
}

// claimSettle claims the leased rows in one batch and settles them
// delivered in one batch, as a worker does.
func claimSettle(ctx context.Context, l *ledger.Ledger, leased []ledger.Leased) error {
	reqs := make([]ledger.ClaimRequest, len(leased))
	for j, r := range leased {
		reqs[j] = ledger.ClaimRequest{Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt}
	}
	claims, errs, err := l.ClaimForSendBatch(ctx, reqs, ledger.ClaimParams{LeaseFor: time.Minute,
		EarlyTolerance: time.Hour})
	if err != nil {
		return err
	}
	now := time.Now()
	settle := make([]ledger.Delivered, 0, len(claims))
	for j, c := range claims {
		if errs[j] != nil || c.Outcome != ledger.ClaimSend {
			return fmt.Errorf("claim of row %d: %v %v", reqs[j].ID, c.Outcome, errs[j])
		}
		settle = append(settle, ledger.Delivered{Hold: c.Hold, Attempt: ledger.Attempt{Attempt: 1,
			Provider: "sandbox", StartedAt: now, FinishedAt: now, Outcome: ledger.AttemptAccepted,
			ProviderMessageID: fmt.Sprintf("bench-%d", c.Hold.ID), HTTPStatus: 200}})
	}
	_, errs, err = l.SettleDeliveredBatch(ctx, settle)
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return err
}

// counters enables or disables, as the owner, the triggers that keep the
// per-minute counters (owed_ledger_minutes). A fixture: owed never
// disables them.
func counters(ctx context.Context, db *benchutil.DB, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	for _, q := range []string{
		"ALTER TABLE owed_notifications " + verb + " TRIGGER owed_ledger_minutes_updated",
		"ALTER TABLE owed_notification_attempts " + verb + " TRIGGER owed_ledger_minutes_attempted",
	} {
		if _, err := db.Owner.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// statementScans runs, once each with nothing due, every statement an idle
// cron call makes (the expiry pass, the send rates, the survey, the
// history sample), the lease's guard, and the operators' reads, and
// reports each one's sequential scans of a ledger table.
func statementScans(ctx context.Context, db *benchutil.DB, l *ledger.Ledger, size int) ([]benchutil.Row, error) {
	sh := ledger.Sharing{Accounts: []ledger.Account{{Cap: 1000}}}
	var out []benchutil.Row
	for _, st := range []struct {
		name string
		run  func() error
	}{
		{"expiry pass (ExpireOverdue)", func() error { _, err := l.ExpireOverdue(ctx, 500); return err }},
		{"send rates (SendRates)", func() error { _, err := l.SendRates(ctx, time.Minute, 2000); return err }},
		{"survey (Survey)", func() error { _, err := l.Survey(ctx, time.Minute, sh, 2000); return err }},
		{"history sample (RecordHistory)", func() error { _, err := l.RecordHistory(ctx, nil); return err }},
		{"idle lease (LeaseSlice, pending)", func() error {
			_, err := l.LeaseSlice(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute,
				Slice: ledger.SlicePending, Sharing: sh})
			return err
		}},
		{"backlog (Backlog, /metrics)", func() error { _, err := l.Backlog(ctx); return err }},
		{"stats, last hour (Stats)", func() error { _, err := l.Stats(ctx, time.Now().Add(-time.Hour)); return err }},
		{"stats, last day (Stats, per-minute counters)", func() error {
			_, err := l.Stats(ctx, time.Now().Add(-24*time.Hour))
			return err
		}},
	} {
		before, err := seqScans(ctx, db)
		if err != nil {
			return nil, err
		}
		if err := st.run(); err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		after, err := seqScans(ctx, db)
		if err != nil {
			return nil, err
		}
		by := map[string]int64{}
		n := after.since(before, by)
		out = append(out, benchutil.Row{Name: fmt.Sprintf("  %s: sequential scans of a ledger table, %d settled%s", st.name, size, scannedTables(by)),
			Value: benchutil.One(float64(n)), Unit: "scans", Target: "0", Pass: benchutil.Check(n == 0)})
	}
	return out, nil
}

// The statements below are fixtures, run by the benchmark as the owner;
// owed itself never runs them.

// addOwed schedules the rows still owed, due in a day, through the
// ledger as an application would. A day outlasts the load: at 20M on a
// loaded machine the load took 75 minutes, and rows due in an hour fell
// due under it, so the idle sweep published them.
func addOwed(ctx context.Context, l *ledger.Ledger) error {
	due := time.Now().Add(owedIn)
	for start := 0; start < owedRows; start += ledger.MaxScheduleBatch {
		var rows []ledger.NewNotification
		for i := start; i < min(owedRows, start+ledger.MaxScheduleBatch); i++ {
			rows = append(rows, ledger.NewNotification{Recipient: fmt.Sprintf("owed-r%d", i), Channel: "sms",
				Kind: "reminder", RefID: fmt.Sprintf("owed-%d", i), DueAt: due, Payload: json.RawMessage(`{"text":"hi"}`)})
		}
		if _, err := l.Schedule(ctx, fmt.Sprintf("tenant-%d", (start/ledger.MaxScheduleBatch)%tenants), rows); err != nil {
			return err
		}
	}
	return nil
}

// ageDelivered moves the rows the bench itself settled (the owed rows it
// made due, leased, claimed and settled), and their attempts, two days
// back, so the next size's windows of an hour and a day hold its own
// traffic and the settled rows of the load alone. The per-minute
// counters follow the update, as they follow any.
func ageDelivered(ctx context.Context, db *benchutil.DB) error {
	for _, q := range []string{
		`UPDATE owed_notification_attempts a SET started_at = a.started_at - interval '2 days',
		        finished_at = a.finished_at - interval '2 days'
		   FROM owed_notifications n
		  WHERE n.id = a.notification_id AND n.ref_id LIKE 'owed-%' AND n.settled_at IS NOT NULL
		    AND a.finished_at > now() - interval '1 day'`,
		`UPDATE owed_notifications SET settled_at = settled_at - interval '2 days',
		        delivered_at = delivered_at - interval '2 days', due_at = due_at - interval '2 days'
		  WHERE ref_id LIKE 'owed-%' AND settled_at > now() - interval '1 day'`,
	} {
		if _, err := db.Owner.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// makeDue makes n of the rows owed in a day due a minute ago.
func makeDue(ctx context.Context, db *benchutil.DB, n int) error {
	_, err := db.Owner.ExecContext(ctx, `UPDATE owed_notifications SET due_at = now() - interval '1 minute'
	    WHERE id IN (SELECT id FROM owed_notifications WHERE settled_at IS NULL AND state = 'pending'
	                  AND ref_id LIKE 'owed-%' ORDER BY id LIMIT $1)`, n)
	return err
}

// addSettled writes rows from..to-1 of the settled ledger into the twelve
// month partitions after the owed rows' (ensured by run), a twelfth in
// each, created in the month of the year before now the partition stands
// for, due an hour after, delivered two seconds late (one in a hundred
// expired instead); it moves the id sequence into each month's range as
// the monthly maintenance would have, then to the month after the last,
// gives every delivered row its accepted attempt and vacuums. It returns
// how many ledger rows it wrote.
//
// The rows are generated by the server (generate_series) and inserted by
// one INSERT … SELECT per month, as the owner, with every index,
// constraint and statement trigger in place, so the counters
// (owed_ledger_minutes) hold these rows as they would hold rows settled one
// by one. Generated on the server, a row costs no round trip and no text
// encoding in Go: the COPY through a temporary table this replaced wrote
// 12,000 rows a second at 1M on the shared machine (83 s), about half an
// hour for 20M. The one row trigger on insert, the default grace's
// (owed_notifications_default_grace), is disabled for the load: with no
// default grace configured (checked) it returns every row unchanged, one
// plpgsql call and one look-up per row for nothing.
func addSettled(ctx context.Context, db *benchutil.DB, from, to int) (int, error) {
	const year = 365 * 24 * time.Hour
	end := time.Now().Add(-2 * time.Hour)
	begin := end.Add(-year)
	var graces int
	if err := db.Owner.QueryRowContext(ctx, `SELECT count(*) FROM owed_default_grace`).Scan(&graces); err != nil {
		return 0, err
	}
	if graces != 0 {
		return 0, fmt.Errorf("owed_default_grace holds %d rows: the load's rows would need their expiry", graces)
	}
	if _, err := db.Owner.ExecContext(ctx,
		`ALTER TABLE owed_notifications DISABLE TRIGGER owed_notifications_default_grace`); err != nil {
		return 0, err
	}
	defer db.Owner.ExecContext(context.WithoutCancel(ctx),
		`ALTER TABLE owed_notifications ENABLE TRIGGER owed_notifications_default_grace`)
	for k := 1; k <= 12; k++ {
		lo, hi := from+(to-from)*(k-1)/12, from+(to-from)*k/12
		first := monthFirstID(k)
		t0 := time.Now()
		tx, err := db.Owner.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		// The month's next free id: the sequence stands there while its
		// rows are written, as it stood while that month was the current.
		if _, err := tx.ExecContext(ctx, `SELECT setval('owed_notifications_id_seq',
		        coalesce((SELECT max(id) FROM owed_notifications WHERE id >= $1 AND id < $2), $1 - 1) + 1, false)`,
			first, first+monthIDs); err != nil {
			tx.Rollback()
			return 0, err
		}
		// Spread over the month the partition stands for, in id order, as
		// time would have written them.
		if _, err := tx.ExecContext(ctx, `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind,
		        ref_id, due_at, payload, state, attempts, delivered_at, settled_at, provider, provider_message_id,
		        created_at, updated_at, last_error)
		    SELECT 'tenant-' || g % $5, 'settled-r' || g, 'sms', 'reminder', 'settled-' || g, c + interval '1 hour',
		           '{"text":"hi"}', CASE WHEN g % 100 = 0 THEN 'expired' ELSE 'delivered' END, 1,
		           CASE WHEN g % 100 <> 0 THEN c + interval '1 hour 2 seconds' END, c + interval '1 hour 2 seconds',
		           'sandbox', 'm' || g, c, c + interval '1 hour 2 seconds',
		           CASE WHEN g % 100 = 0 THEN 'expired' END
		      FROM generate_series($1::bigint, $2::bigint - 1) g
		     CROSS JOIN LATERAL (SELECT $3::timestamptz
		                                + ($4::float8 * (g - $1) / ($2 - $1)) * interval '1 microsecond' AS c) t`,
			lo, hi, begin.Add(year*time.Duration(k-1)/12), float64(year/12/time.Microsecond), tenants); err != nil {
			tx.Rollback()
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt,
		        provider, started_at, finished_at, outcome, provider_message_id, http_status)
		    SELECT id, tenant_id, 1, provider, delivered_at, delivered_at, 'accepted', provider_message_id, 200
		      FROM owed_notifications
		     WHERE state = 'delivered' AND ref_id LIKE 'settled-%' AND id >= $1 AND id < $2
		       AND id > coalesce((SELECT max(notification_id) FROM owed_notification_attempts
		                           WHERE notification_id >= $1 AND notification_id < $2), 0)`, first, first+monthIDs); err != nil {
			tx.Rollback()
			return 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
		fmt.Fprintf(os.Stderr, "bench/ledgerscale: %d rows written (month %d of 12, %.0f rows/s with their attempts)\n",
			hi, k, float64(hi-lo)/time.Since(t0).Seconds())
	}
	// New rows from here on take the month after the last.
	if _, err := db.Owner.ExecContext(ctx, `SELECT setval('owed_notifications_id_seq', $1, false)`, monthFirstID(13)); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for _, t := range []string{"owed_notifications", "owed_notification_attempts"} {
		if _, err := db.Owner.ExecContext(ctx, "VACUUM ANALYZE "+t); err != nil {
			return 0, err
		}
	}
	fmt.Fprintf(os.Stderr, "bench/ledgerscale: vacuumed and analyzed (%.0f s)\n", time.Since(t0).Seconds())
	return to - from, nil
}

// monthIDs is the width of a month's id range (owed_ledger_month_first_id,
// internal/ledger/sql/notifications.sql).
const monthIDs = 100000000000

// monthFirstID is the first id of the k-th month after this one.
func monthFirstID(k int) int64 {
	now := time.Now().UTC()
	months := (now.Year()-2000)*12 + int(now.Month()) - 1 + k
	return int64(months) * monthIDs
}

// seqScans counts the sequential scans of each of the ledger's tables so
// far. The idle sessions of both pools are closed first, so their backends
// report their statistics as they exit (an idle backend reports them up to
// ten seconds later, which would count a fixture's scan in the next
// window), and the exits are given a moment.
func seqScans(ctx context.Context, db *benchutil.DB) (scanCounts, error) {
	db.FlushApp()
	db.Owner.SetMaxIdleConns(0)
	db.Owner.SetMaxIdleConns(2)
	time.Sleep(time.Second)
	// A partition with no page (a month ahead, the empty legacy partition
	// of a fresh install) may be read sequentially for free, as the plan
	// tests of internal/ledger allow.
	rows, err := db.Owner.QueryContext(ctx, `SELECT s.relname, s.seq_scan FROM pg_stat_user_tables s
	    JOIN pg_class c ON c.oid = s.relid
	    WHERE (s.relname LIKE 'owed\_notification%' OR s.relname LIKE 'owed\_receipts%') AND c.relpages > 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	n := scanCounts{}
	for rows.Next() {
		var rel string
		var c int64
		if err := rows.Scan(&rel, &c); err != nil {
			return nil, err
		}
		n[rel] = c
	}
	return n, rows.Err()
}

// scanCounts is each ledger table's (or partition's) count of sequential
// scans, by name.
type scanCounts map[string]int64

// since is how many sequential scans were made after before, in all and by
// table, so a row that misses its target of 0 says which table was read.
func (after scanCounts) since(before scanCounts, by map[string]int64) int64 {
	var total int64
	for rel, n := range after {
		if d := n - before[rel]; d > 0 {
			total += d
			by[rel] += d
		}
	}
	return total
}

// scannedTables names the tables of by, with their counts: "" when none.
func scannedTables(by map[string]int64) string {
	var names []string
	for rel, n := range by {
		if n > 0 {
			names = append(names, fmt.Sprintf("%s ×%d", rel, n))
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return " (" + strings.Join(names, ", ") + ")"
}

// walLSN is the server's current WAL position, in bytes.
func walLSN(ctx context.Context, db *benchutil.DB) (int64, error) {
	var n int64
	err := db.Owner.QueryRowContext(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n)
	return n, err
}

// dropMonth lets retention drop the oldest month of settled rows (the
// first of the twelve, its rows and attempts), as it would a year later
// with a retention of a day: detach, archive, check and drop. It reports
// the detach's time, the archive's throughput and the drop's time after
// the archive is written (target ≤ 1 s). The empty legacy partition a fresh install has
// goes first, uncounted.
func dropMonth(ctx context.Context, db *benchutil.DB) ([]benchutil.Row, error) {
	dir, err := os.MkdirTemp("", "owed-ledgerscale-archive")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	months, err := archive.Run(ctx, db.Owner, archive.RunOptions{
		Retention: archive.Retention{Default: archive.Period(24 * time.Hour)}, Dir: dir, Operator: "bench",
		Now: time.Now().Add(2 * 365 * 24 * time.Hour), Limit: 2})
	if err != nil {
		return nil, err
	}
	for _, m := range months {
		if !m.Dropped || m.Rows == 0 {
			continue
		}
		secs := m.ArchiveTime.Seconds()
		label := fmt.Sprintf("retention of a month (%d rows and their attempts)", m.Rows)
		rows := []benchutil.Row{
			{Name: label + ": detached from the ledger (rename, 3 DETACH CONCURRENTLY)", Value: benchutil.One(m.DetachTime.Seconds()),
				Unit: "s"},
		}
		for _, st := range m.DetachSteps {
			rows = append(rows, benchutil.Row{Name: label + ": … " + st.Name, Value: benchutil.One(st.Time.Seconds()), Unit: "s"})
		}
		rows = append(rows, []benchutil.Row{
			{Name: label + ": archive, rows/s", Value: benchutil.One(float64(m.ArchiveRows) / secs), Unit: "rows/s"},
			{Name: label + ": archive, MB/s written", Value: benchutil.One(float64(m.ArchiveSize) / 1e6 / secs), Unit: "MB/s"},
			{Name: label + ": archive, bytes per ledger row", Value: benchutil.One(float64(m.ArchiveSize) / float64(m.Rows)), Unit: "bytes"},
			{Name: label + ": archive written and checked", Value: benchutil.One(secs), Unit: "s"},
			{Name: label + ": drop after the archive (a look at the holds, DROP, the trail's line)",
				Value: benchutil.One(m.DropTime.Seconds()), Unit: "s", Target: "≤ 1", Pass: benchutil.Check(m.DropTime <= time.Second)},
			{Name: label + ": its schedule keys deleted after the drop (10,000 a statement)", Value: benchutil.One(m.KeysTime.Seconds()),
				Unit: "s"},
		}...)
		return rows, nil
	}
	return nil, fmt.Errorf("retention dropped no month of settled rows: %+v", months)
}

// explainLease prints on stderr the relations the lease statement reads
// sequentially with 1,000 rows due, when the measured leases scanned a
// ledger table: the plan says which part of the statement did.
func explainLease(ctx context.Context, db *benchutil.DB, l *ledger.Ledger) error {
	if err := makeDue(ctx, db, batch); err != nil {
		return err
	}
	plan, _, err := l.ExplainLease(ctx, ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute})
	if err != nil {
		return err
	}
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		return fmt.Errorf("EXPLAIN output: %v", err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" {
			fmt.Fprintf(os.Stderr, "bench/ledgerscale: the lease's plan reads %v sequentially (%v rows)\n",
				n["Relation Name"], n["Actual Rows"])
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
	return nil
}
