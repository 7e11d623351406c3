package sweep

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/stacktest"
)

func (b *bundle) runNotify(t *testing.T) Result {
	t.Helper()
	res, err := b.sw.RunNotify(bg)
	if err != nil {
		t.Fatalf("notify run: %v (%+v)", err, res)
	}
	return res
}

// A notify run leases oldest first under the cron's backpressure cap,
// counting the outstanding work in its lease, leaves expiry to the cron, and
// never lets a row due now jump the backlog owed before it.
func TestNotifyRunKeepsTheCapAndTheOrder(t *testing.T) {
	cfg := testConfig
	cfg.MaxOutstanding = 150
	b := setupWith(t, stacktest.Options{}, cfg, nil)
	exp := b.clk.Now().Add(-time.Second)
	rows := b.Schedule(t, "acme", 200, b.clk.Now().Add(-time.Minute), func(i int, r *ledger.NewNotification) {
		r.DueAt = b.clk.Now().Add(-time.Hour + time.Duration(i)*time.Second)
		if i == 0 {
			r.ExpiresAt = &exp
		}
	})
	var order []int64
	b.sw.afterPublish = func(ids []int64) error { order = append(order, ids...); return nil }

	res := b.runNotify(t)
	if res.Trigger != TriggerNotify || res.Leased != 150 || res.Slices != 2 || res.Expired != 0 ||
		res.HeldBack != HeldBackpressure || res.MaxOutstanding != 150 || !res.Complete {
		t.Fatalf("first notify run: %+v, want 150 leased in 2 slices, held back at the cap, nothing expired", res)
	}
	want := make([]int64, 0, 150)
	for _, r := range rows[1:151] {
		want = append(want, r.ID)
	}
	if !slices.Equal(order, want) {
		t.Errorf("published %v…, want the 150 oldest unexpired rows in due order", order[:min(5, len(order))])
	}
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State != ledger.StatePending {
		t.Errorf("the expired row is %s after a notify run, want pending: the cron settles it", d.State)
	}
	res = b.runNotify(t)
	if res.Leased != 0 || res.Outstanding != 150 || res.HeldBack != HeldBackpressure || !res.Complete {
		t.Fatalf("second notify run: %+v, want nothing leased with 150 outstanding, held back", res)
	}

	// A row due now arrives behind the 49 still owed, and workers free 30
	// rows of room: the run takes the backlog's 30 oldest, not the new row.
	now := b.Schedule(t, "acme", 1, b.clk.Now(), func(_ int, r *ledger.NewNotification) { r.RefID = "due-now" })[0]
	for i := 1; i <= 30; i++ {
		if r, err := b.Ledger.Cancel(bg, "acme", "reminder", fmt.Sprintf("ref-%d", i)); err != nil || r.Changed != 1 {
			t.Fatalf("cancel ref-%d: %+v, %v", i, r, err)
		}
	}
	order = nil
	res = b.runNotify(t)
	if res.Leased != 30 || res.Outstanding != 120 || slices.Contains(order, now.ID) || order[0] != rows[151].ID {
		t.Errorf("third notify run: %+v published %v…, want the 30 oldest of the backlog and not row %d due now", res, order[:min(3, len(order))], now.ID)
	}
	// The cron's run settles the expired row.
	if res := b.run(t); res.Trigger != TriggerCron || res.Expired != 1 {
		t.Errorf("cron run: %+v, want trigger cron and the expired row settled", res)
	}
}

// insertUnencodable writes a row whose tenant id the table takes and the
// services refuse (a control character), as the owning role writing the
// table directly, due at due.
func insertUnencodable(t *testing.T, db *sql.DB, due time.Time) int64 {
	t.Helper()
	const ten = "bad\x01tenant"
	tx, err := db.BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var id int64
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_id', $1, true)`, ten); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`
INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
VALUES ($1, 'r-sql', 'sms', 'reminder', 'unencodable', $2) RETURNING id`, ten, due).Scan(&id); err != nil {
		t.Fatalf("insert as the owner: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return id
}

// A row the sweep cannot encode is settled failed with the reason, and the
// other rows, including those of the same slice, are published: it used to
// end every run ("encode row: tenant_id …") for every tenant.
func TestUnencodableRowIsSetAsideAndTheRestPublished(t *testing.T) {
	b := setup(t, stacktest.Options{})
	bad := insertUnencodable(t, b.DB.Owner, b.clk.Now().Add(-2*time.Minute))
	b.Schedule(t, "acme", 3, b.clk.Now().Add(-time.Minute), nil)

	res := b.run(t)
	if res.SetAside != 1 || res.Published != 3 || !res.Complete {
		t.Fatalf("run: %+v, want 1 row set aside and 3 published", res)
	}
	reg := prometheus.NewRegistry()
	NewMetrics(reg).Observe(res, b.clk.Now())
	if n := setAsideCount(t, reg); n != 1 {
		t.Errorf("owed_sweep_rows_total{outcome=set_aside} = %v, want 1", n)
	}
	if got := len(b.consumeAll(t)); got != 3 {
		t.Errorf("queue holds %d messages, want 3", got)
	}
	var state, reason string
	err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT state, last_error FROM owed_notifications WHERE id = $1`, bad).Scan(&state, &reason)
	})
	if err != nil {
		t.Fatal(err)
	}
	if state != "failed" || !strings.Contains(reason, "control characters") {
		t.Errorf("the unencodable row is %s (%q), want failed with the reason", state, reason)
	}
	if res := b.run(t); res.Leased != 0 || res.Stalled || !res.Complete {
		t.Errorf("next run: %+v, want nothing left to lease", res)
	}
}

// setAsideCount reads owed_sweep_rows_total{outcome="set_aside"} from reg.
func setAsideCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == "owed_sweep_rows_total" && m.GetLabel()[0].GetValue() == "set_aside" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatal("no owed_sweep_rows_total{outcome=set_aside} on the registry")
	return 0
}
