// Command quiethours measures what quiet hours cost the sweep: a ledger of
// 100,000 pending rows across 50 tenants and 50 time zones, due over the
// next week, swept idle (nothing due yet) and leased, first without send
// windows and then with every tenant's windows set (mon-fri 08:00-20:00 on
// each recipient's clock), which holds most rows to an opening. A hold is
// the row's due time (sql/quiet_hours.sql), so the sweep's statements are
// the same; the target is that the idle sweep and the lease stay within
// 1.2× of the ledger without windows. It also times SetQuietHours, which
// moves a tenant's 2,000 pending rows. Print the load average beside the
// numbers (uptime): on a loaded machine the spread is the machine's.
//
//	scripts/with-postgres.sh go run ./bench/quiethours [-runs 15]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/sweep"
)

const (
	tenants    = 50
	queueToken = "bench-queue-token-0123456789"
)

// zones are 50 IANA zones, each tenant's recipients spread over all of them.
var zones = []string{"America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles",
	"America/Anchorage", "Pacific/Honolulu", "America/Sao_Paulo", "America/Argentina/Buenos_Aires",
	"America/Mexico_City", "America/Bogota", "America/Lima", "America/Santiago", "America/Halifax",
	"America/St_Johns", "Europe/London", "Europe/Dublin", "Europe/Lisbon", "Europe/Berlin", "Europe/Paris",
	"Europe/Madrid", "Europe/Rome", "Europe/Warsaw", "Europe/Athens", "Europe/Helsinki", "Europe/Istanbul",
	"Europe/Moscow", "Africa/Cairo", "Africa/Johannesburg", "Africa/Lagos", "Africa/Nairobi", "Asia/Dubai",
	"Asia/Tehran", "Asia/Karachi", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Dhaka", "Asia/Bangkok",
	"Asia/Jakarta", "Asia/Shanghai", "Asia/Singapore", "Asia/Tokyo", "Asia/Seoul", "Australia/Perth",
	"Australia/Adelaide", "Australia/Sydney", "Australia/Lord_Howe", "Pacific/Auckland", "Pacific/Chatham",
	"Pacific/Apia", "Pacific/Kiritimati"}

func main() { benchutil.Main("bench/quiethours", run) }

func run() error {
	runs := flag.Int("runs", 15, "repetitions of each measurement")
	rows := flag.Int("rows", 100000, "pending rows, across 50 tenants and 50 zones")
	flag.Parse()
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

	// Due from an hour ahead over a week, so nothing is due while the
	// benchmark runs, and a hold moves a row forward, never into the past.
	start := time.Now().Add(time.Hour).Truncate(time.Minute)
	fmt.Fprintf(os.Stderr, "bench/quiethours: scheduling %d rows…\n", *rows)
	for b := 0; b*ledger.MaxScheduleBatch < *rows; b++ {
		var batch []ledger.NewNotification
		for i := b * ledger.MaxScheduleBatch; i < min(*rows, (b+1)*ledger.MaxScheduleBatch); i++ {
			batch = append(batch, ledger.NewNotification{Recipient: fmt.Sprintf("r%d", i), Channel: "sms", Kind: "reminder",
				RefID: fmt.Sprintf("ref-%d", i), DueAt: start.Add(time.Duration(i%10080) * time.Minute),
				TimeZone: zones[i%len(zones)], Payload: json.RawMessage(`{"text":"hi"}`)})
		}
		if _, err := l.Schedule(ctx, fmt.Sprintf("tenant-%d", b%tenants), batch); err != nil {
			return err
		}
	}

	// Each measurement starts from a vacuumed, analysed table, as
	// autovacuum leaves it in production: SetQuietHours rewrites most rows,
	// and the dead versions it leaves would otherwise be measured as the
	// windows' cost.
	measure := func(label string) (lease, idle benchutil.Summary, out []benchutil.Row, err error) {
		if _, err := db.Owner.ExecContext(ctx, "VACUUM ANALYZE owed_notifications"); err != nil {
			return lease, idle, nil, err
		}
		p := ledger.LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute}
		var srvMs, rtMs, idleMs []float64
		for i := 0; i < *runs; i++ {
			_, exec, err := l.ExplainLease(ctx, p)
			if err != nil {
				return lease, idle, nil, err
			}
			srvMs = append(srvMs, benchutil.Ms(exec))
			t0 := time.Now()
			got, err := l.Lease(ctx, p)
			if err != nil {
				return lease, idle, nil, err
			}
			rtMs = append(rtMs, benchutil.Ms(time.Since(t0)))
			if len(got) != 0 {
				return lease, idle, nil, fmt.Errorf("idle lease leased %d rows", len(got))
			}
			t0 = time.Now()
			if _, err := sw.Run(ctx); err != nil {
				return lease, idle, nil, err
			}
			idleMs = append(idleMs, benchutil.Ms(time.Since(t0)))
		}
		lease, idle = benchutil.Summarise(rtMs), benchutil.Summarise(idleMs)
		return lease, idle, []benchutil.Row{
			{Name: "lease, server-side (EXPLAIN ANALYZE), " + label, Value: benchutil.Summarise(srvMs), Unit: "ms"},
			{Name: "lease, round trip, " + label, Value: lease, Unit: "ms"},
			{Name: "idle sweep, " + label, Value: idle, Unit: "ms"},
		}, nil
	}
	label := fmt.Sprintf("%d pending, 50 zones", *rows)
	leaseA, idleA, report, err := measure(label + ", no windows")
	if err != nil {
		return err
	}
	var setMs []float64
	held := 0
	for t := 0; t < tenants; t++ {
		t0 := time.Now()
		res, err := l.SetQuietHours(ctx, fmt.Sprintf("tenant-%d", t), ledger.QuietHours{Scope: "tenant",
			Windows: []string{"mon-fri 08:00-20:00"}})
		if err != nil {
			return err
		}
		setMs = append(setMs, benchutil.Ms(time.Since(t0)))
		held += res.Held
	}
	report = append(report, benchutil.Row{Name: fmt.Sprintf("SetQuietHours, a tenant's %d pending rows (%d held in all)",
		*rows/tenants, held), Value: benchutil.Summarise(setMs), Unit: "ms"})
	leaseB, idleB, more, err := measure(label + ", mon-fri 08:00-20:00")
	if err != nil {
		return err
	}
	report = append(report, more...)
	lr, ir := leaseB.Median/leaseA.Median, idleB.Median/idleA.Median
	report = append(report,
		benchutil.Row{Name: "lease round trip, windows ÷ none", Value: benchutil.One(lr), Unit: "×", Target: "≤ 1.2",
			Pass: benchutil.Check(lr <= 1.2)},
		benchutil.Row{Name: "idle sweep, windows ÷ none", Value: benchutil.One(ir), Unit: "×", Target: "≤ 1.2",
			Pass: benchutil.Check(ir <= 1.2)})
	benchutil.Report(report)
	return nil
}
