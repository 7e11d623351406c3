package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
)

// publishDeadline bounds the polls below: a test that fails says so
// instead of hanging. It is not a latency bound.
const publishDeadline = time.Minute

// startListening starts the fast path on s and, with it on, waits for the
// run that follows the LISTEN: from there on, a notification reaches it.
// change, when given, changes the rest of the configuration.
func startListening(t *testing.T, s *stacktest.Stack, on bool, change ...func(*Config)) *DueListener {
	t.Helper()
	d := NewDueListener(newServer(t, s, func(c *Config) {
		c.SweepOnNotify = on
		for _, f := range change {
			f(c)
		}
	}))
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if on {
		waitFor(t, "the run after the LISTEN", func() bool { return metricValue(t, d, "owed_sweep_notify_runs_total", "ok") >= 1 })
	}
	return d
}

// metricValue reads one of the fast path's series from the sweeper's
// registry: the sample whose label value is label ("" for an unlabelled one).
func metricValue(t *testing.T, d *DueListener, name, label string) float64 {
	t.Helper()
	fams, err := d.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() != label {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s{%s} on the registry", name, label)
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), publishDeadline)
	defer cancel()
	for !cond() {
		if !clock.Sleep(ctx, 10*time.Millisecond) {
			t.Fatalf("no %s within %s", what, publishDeadline)
		}
	}
}

// received long-polls the queue until it holds a message for each of ids.
func received(t *testing.T, s *stacktest.Stack, ids ...int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), publishDeadline)
	defer cancel()
	for len(ids) > 0 {
		msgs, err := s.Queue.Receive(ctx, 10, time.Second, 30*time.Second)
		if err != nil {
			t.Fatalf("waiting for rows %v on the queue: %v", ids, err)
		}
		for _, m := range msgs {
			e, err := envelope.Decode(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			ids = slices.DeleteFunc(ids, func(id int64) bool { return id == e.ID })
		}
	}
}

// insertAsApp writes one row due now by plain SQL, as an application that
// writes the documented table directly would, as the application role.
func insertAsApp(t *testing.T, db *sql.DB, ten, ref string) int64 {
	t.Helper()
	var id int64
	err := tenant.InTx(t.Context(), db, ten, func(tx *sql.Tx) error {
		return tx.QueryRowContext(t.Context(), `
INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
VALUES ($1, 'r-sql', 'sms', 'reminder', $2, now()) RETURNING id`, ten, ref).Scan(&id)
	})
	if err != nil {
		t.Fatalf("insert as the application role: %v", err)
	}
	return id
}

// A row due now is published without any cron call, whether it was
// scheduled through the ledger (the API's path) or inserted by plain SQL,
// both as the application role.
func TestDueRowIsPublishedWithoutTheCron(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	notSuperuser(t, s.DB.App)
	d := startListening(t, s, true)

	sched := s.Schedule(t, "acme", 1, time.Now(), nil)
	received(t, s, sched[0].ID)
	received(t, s, insertAsApp(t, s.DB.App, "acme", "plain-sql"))
	// The message is on the queue before its run is counted.
	waitFor(t, "count of both rows in owed_sweep_notify_published_total", func() bool {
		return metricValue(t, d, "owed_sweep_notify_published_total", "") == 2
	})
}

// notSuperuser fails the test when db connects as a superuser, which would
// pass any row-security check vacuously.
func notSuperuser(t *testing.T, db *sql.DB) {
	t.Helper()
	var role string
	var super bool
	if err := db.QueryRowContext(t.Context(), `SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&role, &super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Fatalf("the application connection is the superuser %s", role)
	}
}

// listenProbe is the test's own LISTEN on DueChannel.
func listenProbe(t *testing.T, s *stacktest.Stack) *pq.Listener {
	t.Helper()
	l := pq.NewListener(s.DB.AppURL, listenMinReconnect, listenMaxReconnect, nil)
	t.Cleanup(func() { l.Close() })
	if err := l.Listen(DueChannel); err != nil {
		t.Fatal(err)
	}
	return l
}

// nextNotification waits for the probe's next notification.
func nextNotification(t *testing.T, l *pq.Listener) *pq.Notification {
	t.Helper()
	select {
	case n := <-l.Notify:
		return n
	case <-time.After(publishDeadline):
		t.Fatalf("no notification on %s within %s", DueChannel, publishDeadline)
		return nil
	}
}

// A lost LISTEN connection is reopened, and a run follows the reconnect:
// notifications sent while it was down are lost, so the run stands in for
// them. Nothing is inserted here, so the second run can only be that one.
func TestDueListenerReconnectsAndSweeps(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	d := startListening(t, s, true)
	var killed bool
	if err := s.DB.App.QueryRowContext(t.Context(), `
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener's connection: %v (killed=%v)", err, killed)
	}
	waitFor(t, "run after the reconnect", func() bool { return metricValue(t, d, "owed_sweep_notify_runs_total", "ok") >= 2 })
	received(t, s, s.Schedule(t, "acme", 1, time.Now(), nil)[0].ID)
}

// With OWED_SWEEP_ON_NOTIFY off, a row due now stays owed: the notification
// is sent (a listener of the test's own receives it), but nothing answers it.
func TestSweepOnNotifyOffPublishesNothing(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	d := startListening(t, s, false)
	probe := listenProbe(t, s)

	id := insertAsApp(t, s.DB.App, "acme", "off")
	nextNotification(t, probe)
	// The notification is out; give a listener that wrongly answered it
	// the time a run takes, then look.
	msgs, err := s.Queue.Receive(t.Context(), 10, 2*time.Second, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Errorf("the queue got %d messages with OWED_SWEEP_ON_NOTIFY off", len(msgs))
	}
	var state string
	if err := tenant.InTx(t.Context(), s.DB.App, "acme", func(tx *sql.Tx) error {
		return tx.QueryRowContext(t.Context(), `SELECT state FROM owed_notifications WHERE id = $1`, id).Scan(&state)
	}); err != nil || state != "pending" {
		t.Errorf("row %d is %q (%v), want pending", id, state, err)
	}
	if got := metricValue(t, d, "owed_sweep_notify_listening", ""); got != 0 {
		t.Errorf("owed_sweep_notify_listening = %v with the fast path off", got)
	}
}

// Only rows that become pending and due notify: a row due in an hour, the
// lease, and a leased row handed back unchanged (the sweep's release after
// a refused publish, which would otherwise let a failing queue loop the
// sweeper) send nothing; a reschedule to now does.
func TestDueNotifyOnlyForRowsFallingDue(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	notSuperuser(t, s.DB.App)
	probe := listenProbe(t, s)
	later := s.Schedule(t, "acme", 1, time.Now().Add(time.Hour), nil)[0].ID
	exec := func(q string, args ...any) {
		t.Helper()
		if err := tenant.InTx(t.Context(), s.DB.App, "acme", func(tx *sql.Tx) error {
			_, err := tx.ExecContext(t.Context(), q, args...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	exec(`UPDATE owed_notifications SET state = 'leased', lease_until = now() + interval '1 minute', due_at = now() WHERE id = $1`, later)
	exec(`UPDATE owed_notifications SET state = 'pending', lease_until = NULL WHERE id = $1`, later)
	// A marker the test sends itself after those statements: the first
	// notification to arrive must be it, since notifications arrive in
	// commit order.
	exec(`SELECT pg_notify($1, 'marker')`, DueChannel)
	if n := nextNotification(t, probe); n == nil || n.Extra != "marker" {
		t.Fatalf("first notification %+v, want the marker: a statement above notified", n)
	}
	exec(`UPDATE owed_notifications SET due_at = now() - interval '1 second' WHERE id = $1`, later)
	if n := nextNotification(t, probe); n == nil || n.Extra != "" {
		t.Fatalf("notification %+v, want the trigger's for the reschedule", n)
	}
}

// Notifications arriving during a run make exactly one more run, and runs
// never overlap.
func TestDueRunsAreCoalesced(t *testing.T) {
	t.Parallel()
	started := make(chan int, 10)
	release := make(chan struct{})
	var running, most, n atomic.Int32
	d := newCoalescer()
	run := func(context.Context) {
		k := running.Add(1)
		most.Store(max(most.Load(), k))
		started <- int(n.Add(1))
		<-release
		running.Add(-1)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go d.runEach(ctx, run)

	d.poke()
	<-started
	for range 5 {
		d.poke()
	}
	release <- struct{}{}
	<-started
	if len(d.wake) != 0 {
		t.Errorf("%d more runs are waiting after the coalesced one", len(d.wake))
	}
	release <- struct{}{}
	d.poke()
	if k := <-started; k != 3 {
		t.Errorf("run %d after the coalesced one, want 3", k)
	}
	release <- struct{}{}
	if most.Load() != 1 {
		t.Errorf("%d runs overlapped", most.Load())
	}
}

// With two loops, a notification that arrives during a run starts the next
// run at once instead of waiting for the first to end.
func TestDueRunStartsBesideARunUnderWay(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	d := newCoalescer()
	run := func(context.Context) { started <- struct{}{}; <-release }
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range notifyRuns {
		go d.runEach(ctx, run)
	}
	d.poke()
	<-started
	d.poke()
	select {
	case <-started:
	case <-time.After(publishDeadline):
		t.Fatalf("no second run within %s while the first was under way", publishDeadline)
	}
	close(release)
}

// runsSoFar is how many notify runs have ended, whatever their outcome.
func runsSoFar(t *testing.T, d *DueListener) float64 {
	t.Helper()
	var n float64
	for _, o := range []string{"ok", "incomplete", "stalled"} {
		n += metricValue(t, d, "owed_sweep_notify_runs_total", o)
	}
	return n
}

// notifyFlood sends n notifications on DueChannel with payload, each in its
// own transaction (Postgres folds a transaction's identical notifications
// into one), pausing pause between them, as the login db connects as.
func notifyFlood(t *testing.T, db *sql.DB, n int, payload string, pause time.Duration) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), fmt.Sprintf(`
DO $$
BEGIN
    FOR i IN 1..%d LOOP
        PERFORM pg_notify(%s, %s);
        COMMIT;
        PERFORM pg_sleep(%f);
    END LOOP;
END
$$`, n, pq.QuoteLiteral(DueChannel), pq.QuoteLiteral(payload), pause.Seconds())); err != nil {
		t.Fatalf("notify %d times: %v", n, err)
	}
}

// Any login may NOTIFY owed_due (Postgres has no privilege on channels). A
// notification whose payload is not the triggers' (empty) is ignored and
// starts no run; a flood of well-shaped ones, from a login that is not the
// sweeper's, starts no more runs than OWED_SWEEP_NOTIFY_RATE allows (plus
// notifyRuns at once): the runs started within any span of t seconds are at
// most notifyRuns + rate × t, which a slow machine only lowers. Due rows
// are still published after the flood.
func TestForgedNotificationsAreIgnoredOrBounded(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	const rate = 1.0
	d := startListening(t, s, true, func(c *Config) { c.SweepNotifyRate = rate })
	var login string
	if err := s.DB.Admin.QueryRowContext(t.Context(), `SELECT current_user`).Scan(&login); err != nil || login == testdb.AppUser() {
		t.Fatalf("the flood's login is %q (%v), want one other than the sweeper's", login, err)
	}
	base := runsSoFar(t, d)

	notifyFlood(t, s.DB.Admin, 100, "forged", 0)
	waitFor(t, "100 ignored notifications", func() bool {
		return metricValue(t, d, "owed_sweep_notify_received_total", "ignored") == 100
	})
	if got := metricValue(t, d, "owed_sweep_notify_received_total", "accepted"); got != 0 {
		t.Errorf("%v notifications with a payload were accepted, want none", got)
	}
	if got := runsSoFar(t, d); got != base {
		t.Errorf("%v runs after notifications with a payload, want none", got-base)
	}

	const flood = 400
	start := time.Now()
	notifyFlood(t, s.DB.Admin, flood, "", 5*time.Millisecond)
	waitFor(t, "the flood's notifications", func() bool {
		return metricValue(t, d, "owed_sweep_notify_received_total", "accepted") == flood
	})
	runs, elapsed := runsSoFar(t, d)-base, time.Since(start)
	if bound := notifyRuns + math.Ceil(rate*elapsed.Seconds()); runs > bound {
		t.Errorf("%d notifications over %s started %v runs, want at most %v (%d at once, then %v a second)",
			flood, elapsed.Round(time.Millisecond), runs, bound, notifyRuns, rate)
	}
	if runs < 1 {
		t.Errorf("the flood started no run: a well-shaped notification is still a hint")
	}
	received(t, s, insertAsApp(t, s.DB.App, "acme", "after-the-flood"))
}

// A cron run held back by its cap is followed by top-ups that publish more
// as the workers free room, with no other cron call and the fast path off:
// the queue holds a few seconds of sending, never the backlog.
func TestTheSweeperTopsTheQueueUpBetweenCronCalls(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	d := NewDueListener(newServer(t, s, func(c *Config) {
		c.SweepOnNotify = false
		c.ProviderRate = pace.RateSetting{Rate: pace.Rate{Count: 10, Per: time.Second}, Set: true}
		c.QueueDepth = time.Second
	}))
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	s.Schedule(t, "acme", 30, time.Now().Add(-time.Minute), nil)
	if w := do(d.srv.Handler(), http.MethodPost, "/cron/sweep", "Bearer "+secret); w.Code != http.StatusOK ||
		!strings.Contains(w.Body.String(), `"published":10`) || !strings.Contains(w.Body.String(), `"held_back":"backpressure"`) {
		t.Fatalf("cron run: %d %s, want the cap of 10 published and the rest held back", w.Code, w.Body)
	}
	// The workers send the ten: the top-ups publish the next ten, then the
	// last, as room frees.
	for want := 20; want <= 30; want += 10 {
		if err := s.DB.OwnerTx(t.Context(), func(tx *sql.Tx) error {
			_, err := tx.Exec(`UPDATE owed_notifications SET state = 'delivered', delivered_at = now(), settled_at = now(),
			    lease_until = NULL WHERE state = 'queued'`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("%d rows published by top-ups", want), func() bool {
			return metricValue(t, d, "owed_sweep_notify_published_total", "") >= float64(want-10)
		})
	}
}
