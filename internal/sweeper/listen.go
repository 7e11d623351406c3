package sweeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/sweep"
)

// The fast path and the top-ups. The fast path: a row scheduled due now is
// published within milliseconds instead of at the next cron call. The
// ledger's triggers (internal/ledger/sql/due_notify.sql) send
// pg_notify(DueChannel) when a committed statement leaves a pending row due
// within a minute, whoever wrote it; the DueListener holds a LISTEN
// connection and answers each notification with one sweep run
// (sweep.RunNotify): the cron's shared slices (lease → publish → mark
// queued) under the same caps, without the expiry, survey and requeue
// statements the cron's runs do, so a crash at any step heals by the
// cron's rules. The cron stays the heartbeat and the safety net: a
// notification sent while the sweeper was not listening is caught by the
// run after each (re)connect, or by the next cron call.
//
// The top-ups: a sweep keeps only a few seconds of each provider account's
// sending published (sweep.Config.QueueDepth), so the queue's order never
// decides between tenants. A run (the cron's or the fast path's) that held
// rows back for want of room is followed, sweep.Config.TopUpEvery later (at
// most 500 ms), by another
// notify-style run that tops the queue up as the workers drain it, and so
// on while rows wait, OWED_SWEEP_ON_NOTIFY or not; the minute cron stays
// the safety net.
//
// A notification is only a hint. Postgres has no privilege on channels: any
// login to the database may NOTIFY owed_due. So the listener ignores a
// notification whose payload is not the triggers' (they send an empty one),
// and notify runs start at most OWED_SWEEP_NOTIFY_RATE a second (notifyRuns
// at once after a quiet spell): a flood of forged notifications costs at
// most that many sweeps, each of which leases only rows the ledger owes, so
// it can make a due row go early by no more than the cron would have, and
// never publishes anything else.

// NotifyConfig is the fast path's setting; Config embeds it.
type NotifyConfig struct {
	// SweepOnNotify runs a sweep as soon as a committed write leaves a row
	// due within a minute (OWED_SWEEP_ON_NOTIFY).
	SweepOnNotify bool `envconfig:"SWEEP_ON_NOTIFY"`
	// SweepNotifyRate is the most notify runs started per second
	// (OWED_SWEEP_NOTIFY_RATE; zero is NotifyRateDefault).
	SweepNotifyRate float64 `envconfig:"SWEEP_NOTIFY_RATE"`
}

// Validate refuses a rate that is not a positive number.
func (c NotifyConfig) Validate() error {
	if c.SweepNotifyRate < 0 || math.IsNaN(c.SweepNotifyRate) || math.IsInf(c.SweepNotifyRate, 0) {
		return fmt.Errorf("OWED_SWEEP_NOTIFY_RATE=%v must be a number of notify runs per second above zero (default %v)",
			c.SweepNotifyRate, NotifyRateDefault)
	}
	return nil
}

// notifyRate is SweepNotifyRate, or its default.
func (c NotifyConfig) notifyRate() float64 {
	if c.SweepNotifyRate == 0 {
		return NotifyRateDefault
	}
	return c.SweepNotifyRate
}

const (
	// SweepOnNotifyDefault turns the fast path on.
	SweepOnNotifyDefault = true
	// NotifyRateDefault is the most notify runs started per second. A run
	// sweeps every row due by then, however many notifications asked for
	// it, so the bound costs throughput nothing; a row due now waits at
	// most 1/rate (50 ms) longer while notifications arrive faster.
	NotifyRateDefault = 20.0
	// DueChannel is the channel the ledger's triggers notify.
	DueChannel = "owed_due"
	// listenMinReconnect and listenMaxReconnect bound the listener's
	// reconnect back-off (doubling from the first to the second).
	listenMinReconnect = 250 * time.Millisecond
	listenMaxReconnect = 10 * time.Second
	// listenPing checks the idle LISTEN connection: a connection that died
	// silently is noticed only when something is sent on it.
	listenPing = time.Minute
	// failedRunPause spaces the notify runs after one that failed (a queue
	// refusing publishes), so inserts cannot drive a sweep loop against it;
	// the cron's own calls are not paced.
	failedRunPause = time.Second
	// notifyRuns is how many notify runs may be under way at once: a
	// notification that arrives during a run starts the next at once
	// instead of waiting for the run's publish and mark; SKIP LOCKED keeps
	// the two off each other's rows.
	notifyRuns = 2
)

// DueListener runs a sweep for every notification on DueChannel, coalesced:
// at most notifyRuns runs at a time, and notifications that arrive while
// they are all busy make one more run after them; runs start at most
// OWED_SWEEP_NOTIFY_RATE a second. Its runs are counted in their own series
// (owed_sweep_notify_*), so owed_sweep_last_success_timestamp_seconds stays
// the cron's heartbeat: a dead cron is not hidden by the fast path.
type DueListener struct {
	srv *Server
	on  bool
	url string
	coalescer
	// limit spaces the runs' starts, whatever sends notifications.
	limit *rate.Limiter
	// ignoredLog logs the first ignored notification and then one a
	// minute at most: whoever sends them chooses how many.
	ignoredLog rate.Sometimes

	runs      *prometheus.CounterVec
	received  *prometheus.CounterVec
	published prometheus.Counter
	up        prometheus.Gauge

	mu   sync.Mutex
	stop context.CancelFunc
	done sync.WaitGroup
}

// NewDueListener returns the fast path of s and registers its series on s's
// registry; call it once per Server. It listens as the role of
// OWED_DATABASE_URL (LISTEN and the triggers' pg_notify need no privilege).
func NewDueListener(s *Server) *DueListener {
	d := &DueListener{srv: s, on: s.cfg.SweepOnNotify, url: s.cfg.DatabaseURL, coalescer: newCoalescer(),
		limit:      rate.NewLimiter(rate.Limit(s.cfg.notifyRate()), notifyRuns),
		ignoredLog: rate.Sometimes{First: 1, Interval: time.Minute},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_sweep_notify_runs_total",
			Help: "Sweep runs started by a due-now notification (not the cron), by outcome: ok, incomplete, stalled.",
		}, []string{"outcome"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_sweep_notify_received_total",
			Help: "Notifications received on owed_due, by outcome: accepted (the triggers' empty payload), ignored (any other payload: not owed's trigger).",
		}, []string{"outcome"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "owed_sweep_notify_published_total",
			Help: "Rows published by sweep runs started by a due-now notification.",
		}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "owed_sweep_notify_listening",
			Help: "1 while the sweeper holds its LISTEN connection for due-now rows (OWED_SWEEP_ON_NOTIFY), else 0.",
		}),
	}
	for _, o := range []string{"ok", "incomplete", "stalled"} {
		d.runs.WithLabelValues(o)
	}
	for _, o := range []string{"accepted", "ignored"} {
		d.received.WithLabelValues(o)
	}
	s.reg.MustRegister(d.runs, d.received, d.published, d.up)
	// A cron run held back by backpressure asks for a top-up.
	s.topUp = d.poke
	return d
}

// Start starts the run loops (the top-ups, and the notifications' runs) in
// the background and, with OWED_SWEEP_ON_NOTIFY on, opens the LISTEN
// connection, and returns at once. The connection is retried until it
// succeeds, and a sweep runs after each (re)connect, since notifications
// sent in between are lost. It ends at Stop or when ctx ends.
func (d *DueListener) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil {
		return nil
	}
	ctx, d.stop = context.WithCancel(ctx)
	d.done.Add(notifyRuns)
	for range notifyRuns {
		go func() { defer d.done.Done(); d.runEach(ctx, d.sweepOnce) }()
	}
	if !d.on {
		return nil
	}
	log := d.srv.log
	l := pq.NewListener(d.url, listenMinReconnect, listenMaxReconnect, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventConnected, pq.ListenerEventReconnected:
			d.up.Set(1)
			log.Info().Str("channel", DueChannel).Str("event", ev.String()).Msg("sweeper: listening for due rows")
		case pq.ListenerEventDisconnected:
			d.up.Set(0)
			if ctx.Err() == nil {
				log.Warn().Err(err).Msg("sweeper: due-row listener disconnected; reconnecting, the cron covers the gap")
			}
		case pq.ListenerEventConnectionAttemptFailed:
			log.Warn().Err(err).Msg("sweeper: due-row listener cannot connect; retrying, the cron covers the gap")
		}
	})
	// Closing the listener also ends a Listen still waiting for its first
	// connection.
	context.AfterFunc(ctx, func() { l.Close() })
	d.done.Add(1)
	go func() { defer d.done.Done(); d.listen(ctx, l) }()
	return nil
}

// Stop closes the connection and waits for a run under way to end (the run
// is cancelled; the sweep hands back what it had not published). It is
// safe before Start and twice.
func (d *DueListener) Stop() {
	d.mu.Lock()
	stop := d.stop
	d.mu.Unlock()
	if stop != nil {
		stop()
	}
	d.done.Wait()
	d.up.Set(0)
}

// listen turns notifications into wake-ups until ctx ends.
func (d *DueListener) listen(ctx context.Context, l *pq.Listener) {
	// The listener's own goroutine may be blocked handing over a
	// notification when ctx ends; it exits once it can, after Close, and
	// then closes Notify.
	defer func() { go drain(l) }()
	if err := l.Listen(DueChannel); err != nil {
		if !errors.Is(err, net.ErrClosed) {
			d.srv.log.Error().Err(err).Str("channel", DueChannel).
				Msg("sweeper: cannot listen for due rows; they wait for the cron")
		}
		return
	}
	// Rows written before the LISTEN took effect sent their notifications
	// to nobody.
	d.poke()
	ping := time.NewTicker(listenPing)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case n, ok := <-l.Notify:
			if !ok {
				return
			}
			// A nil notification follows a reconnect: notifications sent
			// while the connection was down are lost, so it sweeps too.
			if n != nil && !d.accept(n) {
				continue
			}
			d.poke()
		case <-ping.C:
			// Ping waits for the server's answer, which a dead connection
			// may take long to refuse; notifications keep flowing meanwhile.
			go l.Ping()
		}
	}
}

// accept says whether n has the shape of the triggers' notifications (an
// empty payload), counting it either way.
func (d *DueListener) accept(n *pq.Notification) bool {
	if n.Extra == "" {
		d.received.WithLabelValues("accepted").Inc()
		return true
	}
	d.received.WithLabelValues("ignored").Inc()
	d.ignoredLog.Do(func() {
		d.srv.log.Warn().Str("channel", n.Channel).Int("sender_pid", n.BePid).Int("payload_bytes", len(n.Extra)).
			Msg("sweeper: ignored a notification whose payload is not owed's trigger's: another database login notifies the channel " +
				"(see owed_sweep_notify_received_total{outcome=\"ignored\"}; the sender's pid is in pg_stat_activity while it is connected)")
	})
	return false
}

// drain discards notifications until the closed listener closes Notify.
func drain(l *pq.Listener) {
	for range l.Notify {
	}
}

// coalescer turns wake-ups into calls of one function, one call per loop
// (runEach) at a time: a wake-up finds an idle loop at once, and wake-ups
// while every loop is busy are folded into one more call.
type coalescer struct{ wake chan struct{} }

func newCoalescer() coalescer { return coalescer{wake: make(chan struct{}, 1)} }

// poke asks for a call; a call already asked for absorbs it.
func (c coalescer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// runEach calls run for each wake-up, one call at a time, until ctx ends.
// Several runEach loops share the wake-ups.
func (c coalescer) runEach(ctx context.Context, run func(context.Context)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		if ctx.Err() != nil {
			return
		}
		run(ctx)
	}
}

// sweepOnce is one notify-started run or top-up, counted in the fast
// path's series, once the rate lets it start. A run held back by
// backpressure asks for the next top-up sweep.Config.TopUpEvery later, as
// does one that filled its requeue batch; a failed one pauses its loop
// failedRunPause first.
func (d *DueListener) sweepOnce(ctx context.Context) {
	if d.limit.Wait(ctx) != nil {
		return
	}
	res, _ := d.srv.sweeper.RunNotify(ctx)
	d.observe(res)
	switch {
	case !res.Complete:
		clock.Sleep(ctx, failedRunPause)
	case d.srv.sweeper.LeftRows(res):
		if clock.Sleep(ctx, d.srv.cfg.Sweep().TopUpEvery()) {
			d.poke()
		}
	}
}

func (d *DueListener) observe(res sweep.Result) {
	switch {
	case res.Stalled:
		d.runs.WithLabelValues("stalled").Inc()
	case !res.Complete:
		d.runs.WithLabelValues("incomplete").Inc()
	default:
		d.runs.WithLabelValues("ok").Inc()
	}
	d.published.Add(float64(res.Published))
	d.srv.metrics.CountSetAside(res.SetAside)
}
