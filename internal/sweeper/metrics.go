package sweeper

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// The sweeper's /metrics reads the ledger's backlog and the queue's depths
// when Prometheus scrapes, not when a sweep runs: these are the series that
// must keep moving when sweeps stop. The Server hands the collectors reads
// through a service.Cache, so a reading is at most a few seconds old and
// scrapes in a loop cost one query per TTL. A run's own counts are
// sweep.Metrics.

// backlogCollector reads the ledger's backlog at scrape time, so the oldest
// owed age keeps rising when sweeps stop: a paused cron or a claim that
// matches nothing shows on the graph instead of freezing it.
type backlogCollector struct {
	backlog func(context.Context) (ledger.Backlog, error)
	timeout time.Duration
	rows    *prometheus.Desc
	oldest  *prometheus.Desc
	up      *prometheus.Desc
}

// NewBacklogCollector returns a collector of owed_backlog_rows{state} and
// owed_oldest_owed_age_seconds, read from backlog (the ledger's Backlog).
func NewBacklogCollector(backlog func(context.Context) (ledger.Backlog, error)) prometheus.Collector {
	return &backlogCollector{
		backlog: backlog,
		timeout: 5 * time.Second,
		rows: prometheus.NewDesc("owed_backlog_rows",
			"Unsettled ledger rows by state (pending, leased, queued, sending).", []string{"state"}, nil),
		oldest: prometheus.NewDesc("owed_oldest_owed_age_seconds",
			"Age of the oldest unsettled row that is already due; 0 when nothing due is owed.", nil, nil),
		up: prometheus.NewDesc("owed_backlog_scrape_success",
			"1 when the backlog could be read from the ledger at this scrape.", nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.oldest
	ch <- c.up
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	b, err := c.backlog(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, s := range []ledger.State{ledger.StatePending, ledger.StateLeased, ledger.StateQueued, ledger.StateSending} {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(b.ByState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.OldestOwedAge.Seconds())
}

// vacuumCollector reads the statistics collector's view of owed's tables
// at scrape time: dead row versions that pile up when autovacuum falls
// behind the ledger's churn make the lease step over settled rows' index
// entries (internal/ledger/sql/notifications.sql), so OwedTableDeadTuplesHigh
// watches them before the sweep slows.
type vacuumCollector struct {
	tables  func(context.Context) ([]ledger.TableVacuum, error)
	timeout time.Duration
	live    *prometheus.Desc
	dead    *prometheus.Desc
	last    *prometheus.Desc
}

// NewVacuumCollector returns a collector of owed_table_live_tuples{table},
// owed_table_dead_tuples{table} and
// owed_table_last_vacuum_timestamp_seconds{table} (absent for a table never
// vacuumed), read from tables (the ledger's TableVacuum). A failed read
// exports nothing: owed_backlog_scrape_success already says the ledger is
// unreadable.
func NewVacuumCollector(tables func(context.Context) ([]ledger.TableVacuum, error)) prometheus.Collector {
	return &vacuumCollector{
		tables:  tables,
		timeout: 5 * time.Second,
		live: prometheus.NewDesc("owed_table_live_tuples",
			"Live row versions of an owed table or partition, as the statistics collector estimates them.",
			[]string{"table"}, nil),
		dead: prometheus.NewDesc("owed_table_dead_tuples",
			"Dead row versions of an owed table or partition waiting for a vacuum.", []string{"table"}, nil),
		last: prometheus.NewDesc("owed_table_last_vacuum_timestamp_seconds",
			"When a vacuum of the table, automatic or manual, last finished.", []string{"table"}, nil),
	}
}

func (c *vacuumCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.dead
	ch <- c.last
}

func (c *vacuumCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	tables, err := c.tables(ctx)
	if err != nil {
		return
	}
	for _, t := range tables {
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(t.Live), t.Table)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(t.Dead), t.Table)
		if t.LastVacuum != nil {
			ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue,
				float64(t.LastVacuum.UnixNano())/1e9, t.Table)
		}
	}
}

// queueStatsTimeout bounds one scrape's call to the queue's stats endpoint,
// so a slow queue makes the scrape report failure instead of hanging
// Prometheus past its own scrape timeout.
const queueStatsTimeout = 5 * time.Second

// queueCollector reads the queue's depths at scrape time. The dead-letter
// depth lives only in the queue, not in the ledger, so the on-call alert on
// it needs a series the sweeper exports; reading at scrape time keeps the
// value current even when no sweep runs.
type queueCollector struct {
	stats      func(context.Context) (queue.Stats, error)
	timeout    time.Duration
	deadLetter *prometheus.Desc
	visible    *prometheus.Desc
	inFlight   *prometheus.Desc
	limit      *prometheus.Desc
	delayed    *prometheus.Desc
	oldest     *prometheus.Desc
	up         *prometheus.Desc
}

// NewQueueCollector returns a collector of owed_queue_dead_letter_depth,
// owed_queue_visible_messages, owed_queue_in_flight_messages,
// owed_queue_in_flight_limit (on a backend that has one),
// owed_queue_delayed_messages and owed_queue_oldest_age_seconds, each read
// from stats (the queue.Queue's Stats) when Prometheus scrapes, plus
// owed_queue_scrape_success saying whether that read worked.
func NewQueueCollector(stats func(ctx context.Context) (queue.Stats, error)) prometheus.Collector {
	return &queueCollector{
		stats:   stats,
		timeout: queueStatsTimeout,
		deadLetter: prometheus.NewDesc("owed_queue_dead_letter_depth",
			"Messages in the queue's dead letters, waiting for on-call (owedctl dlq list).", nil, nil),
		visible: prometheus.NewDesc("owed_queue_visible_messages",
			"Messages ready to be consumed.", nil, nil),
		inFlight: prometheus.NewDesc("owed_queue_in_flight_messages",
			"Messages received and not yet acked or visible again.", nil, nil),
		limit: prometheus.NewDesc("owed_queue_in_flight_limit",
			"The most messages the queue keeps in flight before it delivers nothing more to any worker "+
				"(JetStream: the consumer's MaxAckPending; SQS: the in-flight quota). Absent on a backend without one.", nil, nil),
		delayed: prometheus.NewDesc("owed_queue_delayed_messages",
			"Messages published with a delay that are not visible yet.", nil, nil),
		oldest: prometheus.NewDesc("owed_queue_oldest_age_seconds",
			"Age of the oldest message in the queue.", nil, nil),
		up: prometheus.NewDesc("owed_queue_scrape_success",
			"1 when the queue's stats could be read at this scrape.", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.deadLetter, c.visible, c.inFlight, c.limit, c.delayed, c.oldest, c.up} {
		ch <- d
	}
}

// Collect reports only the success gauge when the read fails: a stale or
// zero depth would read as "no dead letters" and silence the alert.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.deadLetter, prometheus.GaugeValue, float64(s.DeadLetterDepth))
	ch <- prometheus.MustNewConstMetric(c.visible, prometheus.GaugeValue, float64(s.Visible))
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight))
	if s.InFlightLimit > 0 {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.InFlightLimit))
	}
	ch <- prometheus.MustNewConstMetric(c.delayed, prometheus.GaugeValue, float64(s.Delayed))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestAge.Seconds())
}
