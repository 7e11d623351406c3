package worker_test

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// paceScans is how many times owed_provider_pace was read, as Postgres
// counts it for the database.
func paceScans(t *testing.T, b *bundle) int64 {
	t.Helper()
	var n int64
	if err := b.DB.Owner.QueryRow(`SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'owed_provider_pace'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The account's state is not read per send (issue 15's e2e regression):
// a worker that finds the account clear trusts that for a second, so 200
// sends read owed_provider_pace a handful of times, not 200 (the code
// before this change read it once per send).
func TestAClearAccountIsNotReadPerSend(t *testing.T) {
	const rows = 200
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", rows, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	l, _ := b.process(t, "")
	before := paceScans(t, b)
	stop := b.start(t, func(o *worker.Options) {
		o.Ledger = l
		o.Route = func(string) (provider.Sender, error) { return b.Sender, nil }
	})
	b.waitSettled(t, time.Minute)
	stop()
	// Closing the worker's pool ends its backends, which flush their
	// statistics as they exit.
	l.DB().Close()
	var scans int64
	waitFor(t, "the worker's statistics are flushed", func() bool {
		scans = paceScans(t, b) - before
		return scans > 0
	})
	if scans > rows/2 {
		t.Errorf("%d reads of owed_provider_pace for %d sends, want far fewer than one per send", scans, rows)
	}
}
