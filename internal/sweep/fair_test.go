package sweep

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/stacktest"
)

// The reproductions of issue 25: one tenant's work must not decide when
// another tenant's rows go out. Each runs on the injected clock, with the
// workers played by settle: what they send is what the queue hands out,
// first published first.

// settle plays the workers: it settles delivered up to n rows whose message
// has surfaced (published and due), first published first, as a FIFO queue
// hands them out, and returns how many it settled.
func (b *bundle) settle(t *testing.T, n int) int {
	t.Helper()
	var settled int
	err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		return tx.QueryRow(`
WITH s AS (
    SELECT id FROM owed_notifications
     WHERE state IN ('queued', 'sending') AND due_at <= $2 AND lease_until < '9000-01-01'
     ORDER BY published_at, id LIMIT $1 FOR UPDATE
), d AS (
    UPDATE owed_notifications n
       SET state = 'delivered', delivered_at = $2, settled_at = $2, lease_until = NULL, updated_at = $2
      FROM s WHERE n.id = s.id
    RETURNING 1
)
SELECT count(*) FROM d`, n, b.clk.Now()).Scan(&settled)
	})
	if err != nil {
		t.Fatal(err)
	}
	return settled
}

// insert writes rows as the owner, as an application's own SQL or a
// migration could: each is tenant, ref, due_at (SQL text, so -infinity and
// BC dates can be written), created_at.
func (b *bundle) insert(t *testing.T, rows ...[4]string) []int64 {
	t.Helper()
	var ids []int64
	err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		for _, r := range rows {
			var id int64
			if err := tx.QueryRow(`
INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload, created_at)
VALUES ($1, 'r-' || $2, 'sms', 'reminder', $2, $3::timestamptz, '{"text":"hi"}', $4::timestamptz) RETURNING id`,
				r[0], r[1], r[2], r[3]).Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func sqlTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// row reads a row's state, last error and publish time as the owner.
func (b *bundle) row(t *testing.T, id int64) (state, lastError string, published sql.NullTime) {
	t.Helper()
	var e sql.NullString
	err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT state, last_error, published_at FROM owed_notifications WHERE id = $1`, id).
			Scan(&state, &e, &published)
	})
	if err != nil {
		t.Fatal(err)
	}
	return state, e.String, published
}

func paced(t *testing.T, rate string, max int) Config {
	t.Helper()
	cfg := testConfig
	var err error
	if cfg.ProviderRate, err = pace.ParseRate(rate); err != nil {
		t.Fatal(err)
	}
	cfg.MaxOutstanding = max
	return cfg
}

// A tenant's 3,000-row fan-out due now behind a cap of 200 kept another
// tenant's 5 nudges (due 30 s later, on another channel, 10-minute expiry)
// from ever being leased: all 5 ended expired while fan-out rows were still
// owed. Shared, the nudges take the first room that frees once they are
// due, and every one is sent.
func TestAFanOutDoesNotStarveAnotherTenantsNudges(t *testing.T) {
	b := setupWith(t, stacktest.Options{}, paced(t, "100/s", 200), nil)
	start := b.clk.Now()
	b.Schedule(t, "fanout", 3000, start, func(_ int, r *ledger.NewNotification) { r.Channel = "telegram" })
	due, exp := start.Add(30*time.Second), start.Add(30*time.Second+10*time.Minute)
	nudges := b.Schedule(t, "nudges", 5, due, func(_ int, r *ledger.NewNotification) { r.ExpiresAt = &exp })

	// The workers send 2 a second; the cron runs every minute and the
	// sweeper tops the queue up every second in between.
	delivered := 0
	for step := 0; delivered < len(nudges) && step < 700; step++ {
		if step%60 == 0 {
			b.run(t)
		} else {
			b.runNotify(t)
		}
		b.settle(t, 2)
		b.clk.Advance(time.Second)
		delivered = 0
		for _, n := range nudges {
			state, _, published := b.row(t, n.ID)
			if !published.Valid && b.clk.Now().After(due.Add(10*time.Second)) {
				t.Fatalf("nudge %d is still %s 10s after it fell due, behind the fan-out", n.ID, state)
			}
			if state == "expired" {
				t.Fatalf("nudge %d expired", n.ID)
			}
			if state == "delivered" {
				delivered++
			}
		}
	}
	if delivered != len(nudges) {
		t.Fatalf("%d of %d nudges delivered", delivered, len(nudges))
	}
}

// One tenant posted 300 rows due 2000-01-01; another tenant's row due now,
// written a moment before them, waited behind all 300. A row is owed since
// it was written or fell due, whichever is later: the flood is owed from
// now, so the waiting row goes first.
func TestAPastDatedFloodDoesNotJumpTheLine(t *testing.T) {
	b := setupWith(t, stacktest.Options{}, paced(t, "50/s", 100), nil)
	now := b.clk.Now()
	waiting := b.insert(t, [4]string{"waiting", "W-1", sqlTime(now), sqlTime(now.Add(-10 * time.Second))})[0]
	var flood [][4]string
	for i := range 300 {
		flood = append(flood, [4]string{"flood", fmt.Sprintf("F-%d", i), "2000-01-01T00:00:00Z", sqlTime(now)})
	}
	b.insert(t, flood...)
	var order []int64
	b.sw.afterPublish = func(ids []int64) error { order = append(order, ids...); return nil }
	res := b.run(t)
	if res.Leased != 100 || len(order) == 0 || order[0] != waiting {
		t.Errorf("run: %+v published %v…, want the cap of 100 with row %d, owed before the flood, first",
			res, order[:min(3, len(order))], waiting)
	}
}

// A paused tenant's rows (handed back to the queue, queued, pending) took
// the whole cap, and the sweep held every other tenant back for as long as
// the pause lasted. Paused, a tenant counts against nothing and is never
// leased.
func TestAPausedTenantHoldsNoCapacity(t *testing.T) {
	b := setupWith(t, stacktest.Options{}, paced(t, "50/s", 100), nil)
	b.Schedule(t, "noisy", 200, b.clk.Now(), nil)
	if res := b.run(t); res.Leased != 100 || res.HeldBack != HeldBackpressure {
		t.Fatalf("first run: %+v, want the cap of 100 leased, the rest held back", res)
	}
	if _, err := b.DB.Operator.Exec(`SELECT owed_tenant_pause('noisy', 'floods everyone', 'on-call', NULL)`); err != nil {
		t.Fatal(err)
	}
	quiet := b.Schedule(t, "quiet", 10, b.clk.Now(), nil)
	res := b.run(t)
	if res.Leased != 10 || res.Outstanding != 0 || res.Stalled {
		t.Errorf("run with noisy paused: %+v, want quiet's 10 leased, noisy's 100 in flight counted nowhere", res)
	}
	for _, q := range quiet {
		if state, _, _ := b.row(t, q.ID); state != "queued" {
			t.Errorf("quiet's row %d is %s, want queued", q.ID, state)
		}
	}
	if res := b.run(t); res.Leased != 0 || res.Stalled {
		t.Errorf("next run: %+v, want noisy's 100 pending rows left alone while it is paused, and no stall", res)
	}
}

// An application inserted 200 rows queued with a lease to 9999-01-01; every
// sweep then held back on backpressure. owed_apps can no longer write such
// rows (internal/security), and rows already written so are waits parked in
// the ledger, not work in flight: they hold back nothing.
func TestRowsFakedInFlightHoldNothingBack(t *testing.T) {
	b := setupWith(t, stacktest.Options{}, paced(t, "100/s", 200), nil)
	if err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		_, err := tx.Exec(`
INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload, state, lease_until)
SELECT 'faker', 'r' || g, 'sms', 'reminder', 'fake-' || g, $1, '{"text":"x"}', 'queued', '9999-01-01'
  FROM generate_series(1, 200) g`, b.clk.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.Schedule(t, "acme", 10, b.clk.Now(), nil)
	if res := b.run(t); res.Leased != 10 || res.HeldBack != "" || res.Outstanding != 0 {
		t.Errorf("run: %+v, want acme's 10 leased beside the 200 parked rows, nothing held back", res)
	}
}

// withoutTimeChecks drops owed_notifications' time-range checks in b's own
// database, as the owner: the checks (owed_time_in_range,
// internal/ledger/sql/notifications.sql) now refuse such times from every
// writer, and these tests hold the sweep to its own rule beneath them, that
// no row's values fail a statement shared with other rows.
func withoutTimeChecks(t *testing.T, b *bundle) {
	t.Helper()
	if _, err := b.DB.Owner.Exec(`
DO $$
DECLARE
    c text;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = 'owed_notifications'::regclass AND contype = 'c' AND conname LIKE '%in_range' LOOP
        EXECUTE format('ALTER TABLE owed_notifications DROP CONSTRAINT %I', c);
    END LOOP;
END
$$`); err != nil {
		t.Fatal(err)
	}
}

// Times only SQL can write must not fail the statements every tenant
// shares. A due_at of -infinity made every cron run answer 503 ("Scan error
// on column oldest_due_at"); 0044-03-15 BC made the sweep report a stall
// forever. Each is set aside alone, settled failed with the reason, and the
// other rows are published.
func TestUnrepresentableDueTimesAreSetAsideAlone(t *testing.T) {
	t.Parallel()
	for name, due := range map[string]string{"minus-infinity": "-infinity", "bc": "0044-03-15 00:00:00+00 BC"} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, stacktest.Options{})
			withoutTimeChecks(t, b)
			bad := b.insert(t, [4]string{"sql", "BAD", due, sqlTime(b.clk.Now())})[0]
			good := b.Schedule(t, "acme", 3, b.clk.Now().Add(-time.Minute), nil)
			res, err := b.sw.Run(bg)
			if err != nil || !res.Complete || res.Stalled || res.SetAside != 1 || res.Published != 3 {
				t.Fatalf("run: %+v (%v), want a complete run: the row set aside, 3 published", res, err)
			}
			if state, reason, _ := b.row(t, bad); state != "failed" || !strings.Contains(reason, "due_at") {
				t.Errorf("row %d is %s (%q), want failed with the reason naming due_at", bad, state, reason)
			}
			for _, g := range good {
				if state, _, _ := b.row(t, g.ID); state != "queued" {
					t.Errorf("row %d is %s, want queued", g.ID, state)
				}
			}
			if res := b.run(t); res.Stalled || res.Leased != 0 {
				t.Errorf("next run: %+v, want nothing left and no stall", res)
			}
		})
	}
}

// An expires_at of infinity is a row that never expires: it is published,
// and republished when its worker dies mid-send, like any other.
func TestAnInfiniteExpiryIsPublishedAndRequeued(t *testing.T) {
	b := setup(t, stacktest.Options{})
	withoutTimeChecks(t, b)
	id := b.insert(t, [4]string{"sql", "INF", sqlTime(b.clk.Now()), sqlTime(b.clk.Now())})[0]
	if err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE owed_notifications SET expires_at = 'infinity' WHERE id = $1`, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res := b.run(t); res.Published != 1 {
		t.Fatalf("run: %+v, want the row published", res)
	}
	// A worker claimed it and died: its claim's lease runs out.
	if err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE owed_notifications SET state = 'sending', lease_until = $2 WHERE id = $1`, id, b.clk.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Minute)
	if res := b.run(t); res.Requeued != 1 || res.Published != 1 || res.Expired != 0 {
		t.Errorf("run after the claim ran out: %+v, want it requeued and published again, not expired", res)
	}
}

// recordSends writes n send attempts finished over the last two seconds as
// the workers of provider would, against row id: what an unpaced account's
// depth is sized from.
func (b *bundle) recordSends(t *testing.T, id int64, provider string, n int) {
	t.Helper()
	if err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		_, err := tx.Exec(`
INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at, outcome)
SELECT $1, 'acme', g, $2, $3::timestamptz - (g % 2000) * interval '1 millisecond',
       $3::timestamptz - (g % 2000) * interval '1 millisecond', 'accepted'
  FROM generate_series(1, $4) g`, id, provider, b.clk.Now(), n)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// Unpaced, 10,000 rows due now were all published at once, and a row
// scheduled due now 40 s later was still queued 5 s after, behind about
// 7,800 others. An unpaced account keeps published what its workers were
// seen to send in OWED_QUEUE_DEPTH (here 500 a second over 2 s, plus a
// slice), and a new row goes out at the next top-up with that at most ahead
// of it.
func TestAnUnpacedAccountsDepthFollowsItsSends(t *testing.T) {
	cfg := testConfig
	cfg.ProviderRate = pace.Unlimited
	b := setupWith(t, stacktest.Options{}, cfg, nil)
	flood := b.Schedule(t, "flood", 10000, b.clk.Now(), nil)
	b.recordSends(t, flood[0].ID, "sandbox", 2500) // 500 a second over the last 5 s
	const depth = 500*2 + 100
	res := b.run(t)
	if res.Published != depth || res.MaxOutstanding != depth || res.HeldBack != HeldBackpressure {
		t.Fatalf("first run: %+v, want %d published (500/s × 2s + a slice of 100), the rest held back", res, depth)
	}
	b.clk.Advance(40 * time.Second)
	b.recordSends(t, flood[0].ID, "sandbox", 2500)
	late := b.Schedule(t, "late", 1, b.clk.Now(), nil)[0]
	b.settle(t, 100)
	var order []int64
	b.sw.afterPublish = func(ids []int64) error { order = append(order, ids...); return nil }
	b.runNotify(t)
	if state, _, _ := b.row(t, late.ID); state != "queued" || !slices.Contains(order, late.ID) || order[0] != late.ID {
		t.Errorf("the row due now is %s after the top-up (published %v…), want it published first", state, order[:min(3, len(order))])
	}
}

// Publish delays count from the database's clock, which the lease answers
// with: the sweeper's own wall clock, an hour ahead here, does not move
// them.
func TestPublishDelaysCountFromTheLedgersClock(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.clk.Advance(-time.Hour)
	b.Schedule(t, "acme", 1, b.clk.Now().Add(30*time.Second), nil)
	if res := b.run(t); res.Published != 1 {
		t.Fatalf("run: %+v, want the row due in 30s published ahead", res)
	}
	st, err := b.Queue.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delayed != 1 || st.Visible != 0 {
		t.Errorf("queue: %+v, want the message delayed until its due second on the ledger's clock", st)
	}
}

// poison makes every update that would expire or lease the rows of ref
// fail, as a row whose waiting intent the row cannot hold made the shared
// statements fail (a reschedule of an in-flight row to
// 9999-12-31T23:59:59.999999Z failed every run's expiry and requeue, for
// every tenant). Only the test's database has the trigger.
func (b *bundle) poison(t *testing.T, ref string) {
	t.Helper()
	if err := b.DB.OwnerTx(bg, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`
CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'poisoned row %', NEW.id;
END
$$`); err != nil {
			return err
		}
		_, err := tx.Exec(`
CREATE TRIGGER test_poison BEFORE UPDATE ON owed_notifications FOR EACH ROW
WHEN (OLD.ref_id = '` + ref + `' AND NEW.state IN ('expired', 'leased', 'queued')) EXECUTE FUNCTION test_poison()`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// A row the expiry or the lease cannot apply fails neither for the others:
// it is settled failed with the reason, alone, and the rest expire or go
// out.
func TestARowNoStatementCanApplyIsSetAsideAlone(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.poison(t, "poison")
	past := b.clk.Now().Add(-time.Minute)
	expired := b.Schedule(t, "acme", 4, b.clk.Now().Add(-time.Hour), func(i int, r *ledger.NewNotification) {
		r.ExpiresAt = &past
		if i == 0 {
			r.RefID = "poison"
		}
	})
	due := b.Schedule(t, "acme", 4, b.clk.Now().Add(-time.Minute), func(i int, r *ledger.NewNotification) {
		r.RefID = fmt.Sprintf("due-%d", i)
		if i == 0 {
			r.RefID, r.Recipient = "poison", "other"
		}
	})
	res, err := b.sw.Run(bg)
	if err != nil || res.Expired != 3 || res.SetAside != 1 || res.Published != 3 {
		t.Fatalf("run: %+v (%v), want 3 expired, 3 published and the poisoned due row set aside", res, err)
	}
	for _, id := range []int64{expired[0].ID, due[0].ID} {
		if state, reason, _ := b.row(t, id); state != "failed" || !strings.Contains(reason, "poisoned row") {
			t.Errorf("row %d is %s (%q), want failed with the statement's error", id, state, reason)
		}
	}
}
