// Package sweeper is the sweeper service: the URL the hosted cron calls
// every minute (/cron/sweep), the look-ahead refill (/cron/materialise) and
// the scheduling API (/v1/…) and the providers' delivery receipts
// (/receipts/…, internal/receipt) on its public listener (Handler), health,
// readiness, metrics and the operator console on the operator listener (OpsHandler), with its
// configuration (OWED_*, defaults in config.go) and the scrape-time backlog
// and queue gauges (metrics.go), whose readings are cached for
// service.CacheTTLDefault so scrapes cannot exhaust the pool. One run of the sweep is package sweep. The cron is a
// heartbeat, never the source of truth: a missed call is recovered by the
// next one, because the ledger, not the cron, knows what is owed.
package sweeper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/console"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/receipt"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweep"
)

// MetricsAddrDefault is the sweeper's operator listener (OWED_METRICS_ADDR):
// loopback, so nothing outside the host reads /metrics or /readyz unless
// the deployment opens it (the Kubernetes manifests set :8081).
const MetricsAddrDefault = "127.0.0.1:8081"

// Server routes the sweeper's HTTP endpoints.
type Server struct {
	cfg     Config
	clock   clock.Clock
	ledger  *ledger.Sweep
	queue   queue.Queue
	sweeper *sweep.Sweeper
	mat     *materialise.Materialiser
	metrics *sweep.Metrics
	reg     *prometheus.Registry
	// cronSecret checks the hosted cron's bearer secret (OWED_CRON_SECRET).
	cronSecret service.Bearer
	log        zerolog.Logger
	mux, ops   *http.ServeMux
	// stats and ready cache the queue's stats and the readiness answer,
	// shared by every scrape and probe (see service.Cache).
	stats *service.Cache[queue.Stats]
	ready *service.Cache[readiness]
	// topUp asks for a top-up run after a cron run left rows to lease
	// (sweep.Sweeper.LeftRows; DueListener); nil without one.
	topUp func()
	// history is the minute the cron last sampled for the console's
	// history (recordHistory).
	history struct {
		sync.Mutex
		minute time.Time
	}
	// partitions is the hour the cron last kept the ledger's partitions
	// (keepPartitions).
	partitions struct {
		sync.Mutex
		hour time.Time
	}
}

// Option is an optional part of the service.
type Option func(*options)

type options struct {
	operator ops.Ledger
	reads    ledger.HasReads
}

// WithOperator gives the console the ledger over on-call's login (a member
// of owed_operator, OWED_OPERATOR_DATABASE_URL): its holds, tenant pauses
// and audit lines run as that login. Without it the console runs on l, the
// services' login, which the database refuses them.
func WithOperator(l ops.Ledger) Option { return func(o *options) { o.operator = l } }

// WithReads gives the console the ledger on a read replica
// (OWED_READ_DATABASE_URL) for its pages that only read; without it they
// read the console's own ledger.
func WithReads(l ledger.HasReads) Option { return func(o *options) { o.reads = l } }

// graceWriteTimeout bounds New's write of the default grace.
const graceWriteTimeout = 10 * time.Second

// New assembles the service from its parts. l is the whole ledger, as the
// sweeper is a composition root: it hands each part the role that part calls
// (the sweep its Sweep, the API its Scheduling and Reads, the receipts their
// Receipts, the console its Reads and Actions) and keeps the Sweep for the
// history sample. clk (nil is clock.Real()) is the one clock of every part;
// l should be built on the same one. It stores the
// default grace (OWED_DEFAULT_GRACE, OWED_DEFAULT_GRACE_OVERRIDES) in the
// database, which applies it to every row scheduled from then on, whoever
// writes it; a sweeper that cannot store it does not start.
func New(cfg Config, l *ledger.Ledger, q queue.Queue, log zerolog.Logger, clk clock.Clock, opts ...Option) (*Server, error) {
	if clk == nil {
		clk = clock.Real()
	}
	o := options{operator: l}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), graceWriteTimeout)
	defer cancel()
	if err := l.SetDefaultGrace(ctx, cfg.DefaultGrace, cfg.DefaultGraceOverrides); err != nil {
		return nil, fmt.Errorf("OWED_DEFAULT_GRACE: store the default grace in the database: %w", err)
	}
	if g := cfg.DefaultGrace.String(); g != "" {
		log.Info().Str("default_grace", g).Str("overrides", cfg.DefaultGraceOverrides.String()).
			Msg("sweeper: default grace stored")
	}
	sc := cfg.Sweep()
	watch := newQueueWatch(q, clk)
	sw, err := sweep.New(l, watch, sc, log)
	if err != nil {
		return nil, err
	}
	backlog := &service.Cache[ledger.Backlog]{Fetch: l.Backlog, Clock: clk}
	vacuum := &service.Cache[[]ledger.TableVacuum]{Fetch: l.TableVacuum, Clock: clk}
	stats := &service.Cache[queue.Stats]{Fetch: watch.Stats, Clock: clk}
	watch.stats = stats.Get
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		NewBacklogCollector(backlog.Get), NewVacuumCollector(vacuum.Get), NewQueueCollector(stats.Get), watch, buildinfo.Collector(),
		// Each pool's statistics (open, in use, idle, waits), named by the
		// role it logs in as: the runtime role's, and on-call's when the
		// console has its own login.
		collectors.NewDBStatsCollector(l.DB(), "runtime"))
	if o.operator != l {
		reg.MustRegister(collectors.NewDBStatsCollector(o.operator.ReadsRole().DB(), "operator"))
	}
	s := &Server{cfg: cfg, clock: clk, ledger: l.Sweep, queue: watch, sweeper: sw, metrics: sweep.NewMetrics(reg), reg: reg,
		cronSecret: service.NewBearer(cfg.CronSecret), log: log, stats: stats,
		mux: http.NewServeMux(), ops: http.NewServeMux(), mat: materialise.New(materialise.NewSQLSource(l.DB()), l, cfg.Materialise, clk)}
	s.ready = &service.Cache[readiness]{Fetch: s.readiness, Clock: clk}
	s.mux.HandleFunc("/cron/sweep", s.cron(s.handleSweep))
	s.mux.HandleFunc("/cron/materialise", s.cron(s.handleMaterialise))
	limits := api.NewLimiter(cfg.APILimits(), cfg.APITenantLimits)
	reg.MustRegister(limits)
	s.mux.Handle("/v1/", api.New(api.Options{Ledger: l, Tokens: api.NewTokens(l.DB(), clk), ServiceToken: cfg.APIToken,
		Log: log, Clock: clk, MaxExpandedBytes: cfg.APIMaxExpandedBytes, Limits: limits, Metrics: reg}))
	receipts, err := receipt.New(cfg.Receipt, l.Receipts, clk, log)
	if err != nil {
		return nil, err
	}
	receipts.Mount(s.mux)
	s.mux.HandleFunc("GET /healthz", service.Healthz)
	s.ops.HandleFunc("GET /healthz", service.Healthz)
	s.ops.HandleFunc("GET /readyz", s.handleReady)
	s.ops.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.ops.Handle(console.Prefix, console.New(console.Options{Ledger: o.operator, Reads: o.reads, Queue: q, Token: cfg.ConsoleToken,
		TrustedHeader: cfg.ConsoleTrustedHeader, Log: log, Clock: clk, Metrics: reg}))
	return s, nil
}

// Handler returns the public routes: /cron/*, /v1/, /receipts/* and /healthz.
func (s *Server) Handler() http.Handler { return s.mux }

// OpsHandler returns the operator routes, for OWED_METRICS_ADDR: /healthz,
// /readyz, /metrics and the operator console under /console/ (behind its
// own token, internal/console). They are never served on the public
// listener.
func (s *Server) OpsHandler() http.Handler { return s.ops }

// cron wraps a /cron endpoint: POST only, bearer secret required.
func (s *Server) cron(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed: use POST")
			return
		}
		if !s.cronSecret.Authorized(r) {
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer secret (OWED_CRON_SECRET)")
			return
		}
		// The cron sends no body (some schedulers send "{}"). Anything else
		// is not the cron, and is refused before the run starts.
		body, err := io.ReadAll(r.Body)
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", "the cron endpoints take no body")
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, "bad_request", "could not read the request body")
			return
		}
		if b := bytes.TrimSpace(body); len(b) > 0 && !bytes.Equal(b, []byte("{}")) {
			writeError(w, http.StatusBadRequest, "bad_request", "the cron endpoints take no body (or an empty JSON object)")
			return
		}
		h(w, r)
	}
}

// sweepAnswer is the body of /cron/sweep: the run's result and, when one of
// its publishes failed, the queue's error (the queue is not in /readyz, so
// this and owed_queue_up are where an outage shows).
type sweepAnswer struct {
	sweep.Result
	QueueError string `json:"queue_error,omitempty"`
}

func (s *Server) handleSweep(w http.ResponseWriter, r *http.Request) {
	ctx, perr := withPublishErr(r.Context())
	res, _ := s.sweeper.Run(ctx)
	s.metrics.Observe(res, s.clock.Now())
	s.recordHistory(r.Context())
	s.keepPartitions(r.Context())
	if s.sweeper.LeftRows(res) && s.topUp != nil {
		s.topUp()
	}
	status := http.StatusOK
	if !res.Complete || res.Stalled {
		// A hosted cron retries or alerts on non-2xx; the counts so far are
		// in the body either way.
		status = http.StatusServiceUnavailable
	}
	ans := sweepAnswer{Result: res}
	if err := perr.get(); err != nil {
		ans.QueueError = "the queue refused or did not answer a publish (" + err.Error() +
			"); the rows stay owed and a later sweep publishes them"
	}
	writeJSON(w, status, ans)
}

// historyTimeout bounds one sample of the history, so a slow database
// delays the cron's answer by at most this much.
const historyTimeout = 10 * time.Second

// recordHistory takes the console's per-minute sample (ledger.RecordHistory)
// once a minute, on the first cron call of each: the cron is the minute's
// heartbeat, so a paused cron leaves a visible gap rather than a made-up
// sample. Several replicas may each try a minute; the first sample stands.
// A failure is logged and never fails the sweep.
func (s *Server) recordHistory(ctx context.Context) {
	minute := s.clock.Now().Truncate(time.Minute)
	s.history.Lock()
	defer s.history.Unlock()
	if !minute.After(s.history.minute) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	var depth *int64
	if st, err := s.stats.Get(ctx); err == nil {
		depth = &st.DeadLetterDepth
	}
	n, err := s.ledger.RecordHistory(ctx, depth)
	if err != nil {
		s.log.Error().Err(err).Msg("sweeper: the history sample was not recorded; the console's charts miss this minute")
		return
	}
	s.history.minute = minute
	s.log.Debug().Int64("samples", n).Time("minute", minute).Msg("history sampled")
}

// partitionsTimeout bounds one call of the partitions' maintenance; the
// call itself gives up on its lock after a second.
const partitionsTimeout = 10 * time.Second

// keepPartitions makes the ledger's partitions of this month and the next
// two that are missing (ledger.KeepPartitions), on the first cron call of
// each hour, so a deployment where no operator runs owedctl partitions
// ensure still gives each month its own partitions. An hour is often
// enough: a month's partitions are made two months ahead. An hour whose
// call failed is tried again on the next cron call; a failure is logged
// and never fails the sweep.
func (s *Server) keepPartitions(ctx context.Context) {
	hour := s.clock.Now().Truncate(time.Hour)
	s.partitions.Lock()
	defer s.partitions.Unlock()
	if !hour.After(s.partitions.hour) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), partitionsTimeout)
	defer cancel()
	n, err := s.ledger.KeepPartitions(ctx)
	if err != nil {
		s.log.Error().Err(err).Msg("sweeper: the ledger's partitions ahead were not made; new months' rows stay in the last month's partition until a call succeeds")
		return
	}
	s.partitions.hour = hour
	if n > 0 {
		s.log.Info().Int("partitions", n).Msg("sweeper: made the ledger's partitions ahead")
	}
}

func (s *Server) handleMaterialise(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	res, err := s.mat.Run(r.Context())
	ev := s.log.Info()
	status := http.StatusOK
	if err != nil {
		ev, status = s.log.Error().Err(err), http.StatusServiceUnavailable
	}
	ev.Int("items", res.Items).Int("scheduled", res.Scheduled).Int("existing", res.Existing).Int("late", res.Late).
		Int("rescheduled", res.Rescheduled).Int("cancelled", res.Cancelled).Int("intents", res.Intents).
		Int("skipped", len(res.Skipped)).Int64("duration_ms", time.Since(start).Milliseconds()).Msg("materialise")
	if err != nil {
		writeJSON(w, status, map[string]any{"result": res, "error": err.Error()})
		return
	}
	writeJSON(w, status, res)
}

// readiness is one answer of /readyz.
type readiness struct {
	status int
	checks map[string]string
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	res, _ := s.ready.Get(r.Context())
	if res.checks == nil {
		// The wait for another probe's check ended with this request.
		res = readiness{http.StatusServiceUnavailable, map[string]string{"status": "request cancelled"}}
	}
	writeJSON(w, res.status, res.checks)
}

// readiness checks what the scheduling API needs: the database, and a
// schema this build runs on (migrate.Check: a range, not one version, so
// old pods stay ready after `migrate up` and after a rollback). The queue
// is not checked: its state is in owed_queue_up and the sweep's answer.
func (s *Server) readiness(ctx context.Context) (readiness, error) {
	checks := map[string]string{}
	ok := true
	if err := s.ledger.DB().PingContext(ctx); err != nil {
		checks["database"], ok = "unreachable", false
	} else {
		checks["database"] = "ok"
		checks["schema"], ok = service.SchemaReady(ctx, s.ledger.DB())
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	return readiness{status, checks}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
