package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

func statsCmd(ctx context.Context, args []string) error {
	return runStats(ctx, os.Stdout, args)
}

// runStats is statsCmd writing to out, so tests read what an operator sees.
func runStats(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("stats", "stats [--since 1h] [--json] [--queue NAME] [--database-url URL]",
		"OWED_DATABASE_URL=postgres://owed_app@db/owed OWED_QUEUE_URL=http://127.0.0.1:8181 OWED_QUEUE_TOKEN=dev-token owedctl stats --since 24h")
	since := fs.Duration("since", time.Hour, "report deliveries settled in this window")
	qf := addQueueFlags(fs)
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseOnlyFlags(fs, args, ": stats takes only flags"); err != nil {
		return err
	}
	if *since <= 0 {
		return usageError{fmt.Sprintf("--since=%s must be above zero, e.g. 1h", *since)}
	}
	l, closeDB, err := openLedger(readLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer closeDB()

	h, err := ops.ReadHealth(ctx, l, clock.Real().Now(), *since)
	if err != nil {
		return err
	}
	h.DeadLetterDepth, h.DeadLetterUnknown = deadLetterDepth(ctx, qf)

	if *qf.json {
		return printJSON(out, h)
	}
	printHealth(out, h, *since)
	return nil
}

// deadLetterDepth asks the configured queue (ops.DeadLetterDepth), or says
// why it could not.
func deadLetterDepth(ctx context.Context, qf queueFlags) (*int64, string) {
	if os.Getenv("OWED_QUEUE_URL") == "" && os.Getenv("OWED_QUEUE_BACKEND") == "" {
		return nil, "the queue is not configured: set OWED_QUEUE_URL and OWED_QUEUE_TOKEN, or OWED_QUEUE_BACKEND and its variables"
	}
	ctx, cancel := context.WithTimeout(ctx, ops.QueueStatsTimeout)
	defer cancel()
	q, _, err := qf.open(ctx)
	if err != nil {
		return nil, err.Error()
	}
	defer q.Close()
	return ops.DeadLetterDepth(ctx, q)
}

func printHealth(out io.Writer, h ops.Health, since time.Duration) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	d := h.Delivery
	fmt.Fprintf(w, "window:\tlast %s (since %s)\n", since, stamp(&d.Since))
	fmt.Fprintf(w, "settled:\tdelivered %d, failed %d, expired %d, skipped %d, cancelled %d\n",
		d.Delivered, d.Failed, d.Expired, d.Skipped, d.Cancelled)
	r := h.Receipts
	fmt.Fprintf(w, "receipts:\taccepted %d: confirmed delivered %d, bounced %d, failed %d, unconfirmed %d\n",
		r.Accepted, r.ConfirmedDelivered, r.Bounced, r.Failed, r.Unconfirmed)
	fmt.Fprintf(w, "delivery lag:\tp50 %s, p95 %s, max %s\n", round(d.LagP50), round(d.LagP95), round(d.LagMax))
	fmt.Fprintf(w, "duplicate sends:\t%d rows accepted more than once, %d possible duplicate resends\n",
		d.DuplicateRows, d.PossibleDuplicates)
	if h.DeadLetterDepth != nil {
		fmt.Fprintf(w, "dead letters:\t%d\n", *h.DeadLetterDepth)
	} else {
		fmt.Fprintf(w, "dead letters:\tunknown (%s)\n", h.DeadLetterUnknown)
	}
	fmt.Fprintf(w, "provider-limited minutes:\t%d of %d (%.1f%%) had a provider 429\n", h.ProviderLimitedMinutes,
		h.WindowMinutes, 100*float64(h.ProviderLimitedMinutes)/float64(max(h.WindowMinutes, 1)))
	b := h.Backlog
	fmt.Fprintf(w, "owed backlog:\t%d (pending %d, leased %d, queued %d, sending %d)\n", b.Owed,
		b.ByState[ledger.StatePending], b.ByState[ledger.StateLeased], b.ByState[ledger.StateQueued], b.ByState[ledger.StateSending])
	if b.OldestDueAt != nil {
		fmt.Fprintf(w, "oldest owed age:\t%s (due %s)\n", round(b.OldestOwedAge), stamp(b.OldestDueAt))
	} else {
		fmt.Fprintf(w, "oldest owed age:\t0s (nothing due is owed)\n")
	}
	w.Flush()
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
