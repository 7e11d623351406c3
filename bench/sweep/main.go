// Command sweep measures the sweeper's two costs that matter:
//
//  1. a sweep of 500 owed rows into the queue emulator (lease, publish_batch,
//     mark queued), median of many runs (target ≤ 150 ms);
//  2. the lease on an idle ledger as the ledger grows (10,000 / 1,000,000 /
//     5,000,000 settled rows, 100 owed): the statement's server-side time from
//     EXPLAIN ANALYZE and its round trip, a whole idle sweep, and beside them
//     the approach the design replaced — load every open item of every tenant
//     and filter in the application — with the ratio. Targets: flat (1M within
//     1.5× of 10k), ≤ 1 ms server-side at 5M, idle sweep ≤ 5 ms at 1M.
//
// Run it against a throwaway server:
//
//	scripts/with-postgres.sh go run ./bench/sweep [-sizes 10000,1000000,5000000]
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/tenant"
)

const (
	tenants    = 50
	owedRows   = 100
	queueToken = "bench-queue-token-0123456789"
)

func main() { benchutil.Main("bench/sweep", run) }

func run() error {
	sizesFlag := flag.String("sizes", "10000,1000000,5000000", "settled ledger sizes to measure the idle lease at")
	runs := flag.Int("runs", 15, "repetitions of each measurement")
	naiveMax := flag.Int("naive-max", 1000000, "largest ledger the naive full scan is measured on (it is slow)")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("-sizes: %q is not a list of row counts", *sizesFlag)
		}
		sizes = append(sizes, n)
	}
	ctx := context.Background()
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
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

	var rows []benchutil.Row
	// 1. Sweeps of 500 owed rows.
	var sweepMs []float64
	for i := 0; i < *runs; i++ {
		if err := scheduleOwed(ctx, l, 500, fmt.Sprintf("run%d", i), time.Now().Add(-time.Minute)); err != nil {
			return err
		}
		start := time.Now()
		res, err := sw.Run(ctx)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		sweepMs = append(sweepMs, benchutil.Ms(time.Since(start)))
		if res.Published != 500 {
			return fmt.Errorf("sweep published %d, want 500", res.Published)
		}
		if err := settleAll(ctx, db); err != nil {
			return err
		}
	}
	s := benchutil.Summarise(sweepMs)
	rows = append(rows, benchutil.Row{Name: "sweep of 500 owed rows into the emulator", Value: s, Unit: "ms",
		Target: "≤ 150", Pass: benchutil.Check(s.Median <= 150)})

	// 2. The idle lease as the ledger grows.
	if err := scheduleOwed(ctx, l, owedRows, "owed", time.Now().Add(time.Hour)); err != nil {
		return err
	}
	have := 0
	server := map[int]benchutil.Summary{}
	for _, size := range sizes {
		if size > have {
			fmt.Fprintf(os.Stderr, "bench/sweep: growing the ledger to %d settled rows…\n", size)
			if err := addSettled(ctx, db, have, size); err != nil {
				return err
			}
			have = size
		}
		// The owed rows are due in an hour: the lease finds them in the
		// partial index and leaves them, which is an idle sweep's work.
		p := ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute}
		var srvMs, rtMs, idleMs, naiveMs []float64
		for i := 0; i < *runs; i++ {
			_, exec, err := l.ExplainLease(ctx, p)
			if err != nil {
				return err
			}
			srvMs = append(srvMs, benchutil.Ms(exec))
			start := time.Now()
			got, err := l.Lease(ctx, p)
			if err != nil {
				return err
			}
			rtMs = append(rtMs, benchutil.Ms(time.Since(start)))
			if len(got) != 0 {
				return fmt.Errorf("idle lease leased %d rows", len(got))
			}
			start = time.Now()
			if _, err := sw.Run(ctx); err != nil {
				return err
			}
			idleMs = append(idleMs, benchutil.Ms(time.Since(start)))
			if size <= *naiveMax && i < 3 {
				start = time.Now()
				if n, err := naiveScan(ctx, db); err != nil {
					return err
				} else if n != 0 {
					return fmt.Errorf("naive scan found %d due rows, want 0", n)
				}
				naiveMs = append(naiveMs, benchutil.Ms(time.Since(start)))
			}
		}
		server[size] = benchutil.Summarise(srvMs)
		label := fmt.Sprintf("%d settled + %d owed", size, owedRows)
		row := benchutil.Row{Name: "lease, server-side (EXPLAIN ANALYZE), " + label, Value: server[size], Unit: "ms"}
		if size >= 5000000 {
			row.Target, row.Pass = "≤ 1", benchutil.Check(server[size].Median <= 1)
		}
		rows = append(rows, row,
			benchutil.Row{Name: "lease, round trip, " + label, Value: benchutil.Summarise(rtMs), Unit: "ms"})
		idle := benchutil.Summarise(idleMs)
		irow := benchutil.Row{Name: "idle sweep (expire+lease+checks), " + label, Value: idle, Unit: "ms"}
		if size == 1000000 {
			irow.Target, irow.Pass = "≤ 5", benchutil.Check(idle.Median <= 5)
		}
		rows = append(rows, irow)
		if len(naiveMs) > 0 {
			n := benchutil.Summarise(naiveMs)
			rows = append(rows, benchutil.Row{Name: "naive: load every tenant's items, filter in app, " + label, Value: n, Unit: "ms"},
				benchutil.Row{Name: "naive ÷ idle sweep, " + label, Value: benchutil.Summary{Median: n.Median / idle.Median, Min: n.Min / idle.Max, Max: n.Max / idle.Min, N: n.N}, Unit: "×"})
		}
	}
	if a, ok := server[10000]; ok {
		if b, ok := server[1000000]; ok {
			ratio := b.Median / a.Median
			rows = append(rows, benchutil.Row{Name: "lease server-side time, 1M ÷ 10k", Value: benchutil.Summary{Median: ratio, Min: ratio, Max: ratio, N: 1},
				Unit: "×", Target: "≤ 1.5", Pass: benchutil.Check(ratio <= 1.5)})
		}
	}
	benchutil.Report(rows)
	return nil
}

func scheduleOwed(ctx context.Context, l *ledger.Ledger, n int, prefix string, due time.Time) error {
	for start := 0; start < n; start += ledger.MaxScheduleBatch {
		var batch []ledger.NewNotification
		for i := start; i < min(n, start+ledger.MaxScheduleBatch); i++ {
			batch = append(batch, ledger.NewNotification{Recipient: fmt.Sprintf("%s-r%d", prefix, i), Channel: "sms",
				Kind: "reminder", RefID: fmt.Sprintf("%s-%d", prefix, i), DueAt: due, Payload: json.RawMessage(`{"text":"hi"}`)})
		}
		if _, err := l.Schedule(ctx, fmt.Sprintf("tenant-%d", start%tenants), batch); err != nil {
			return err
		}
	}
	return nil
}

// The statements below are fixtures and the rejected design, run by the
// benchmark as the owner; owed itself never runs them.

func settleAll(ctx context.Context, db *benchutil.DB) error {
	return db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE owed_notifications SET state = 'delivered', delivered_at = now(),
		    settled_at = now(), lease_until = NULL WHERE settled_at IS NULL AND due_at < now()`)
		return err
	})
}

func addSettled(ctx context.Context, db *benchutil.DB, from, to int) error {
	for lo := from; lo < to; lo += 500000 {
		hi := min(to, lo+500000)
		if err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at,
			        payload, state, attempts, delivered_at, settled_at, provider, provider_message_id)
			    SELECT 'tenant-' || (g % $3), 'settled-r' || g, 'sms', 'reminder', 'settled-' || g,
			           now() - interval '1 day' - g * interval '1 second', '{"text":"hi"}', 'delivered', 1,
			           now() - interval '1 day', now() - interval '1 day', 'sandbox', 'm' || g
			      FROM generate_series($1::bigint, $2::bigint - 1) g`, lo, hi, tenants)
			return err
		}); err != nil {
			return err
		}
	}
	_, err := db.Owner.ExecContext(ctx, `VACUUM ANALYZE owed_notifications`)
	return err
}

// naiveScan is the approach the design replaced: for every tenant, load all
// of its items and keep the due, unsent ones in the application.
func naiveScan(ctx context.Context, db *benchutil.DB) (int, error) {
	now := time.Now()
	due := 0
	for t := 0; t < tenants; t++ {
		id := fmt.Sprintf("tenant-%d", t)
		if err := tenant.InTx(ctx, db.App, id, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT due_at, settled_at IS NOT NULL, payload FROM owed_notifications WHERE tenant_id = $1`, id)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var d time.Time
				var settled bool
				var payload []byte
				if err := rows.Scan(&d, &settled, &payload); err != nil {
					return err
				}
				if !settled && !d.After(now) {
					due++
				}
			}
			return rows.Err()
		}); err != nil {
			return 0, err
		}
	}
	return due, nil
}
