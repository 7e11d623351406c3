// Package sandbox is a local provider for the one-machine stack, tests and
// drills. Its Server accepts the webhook adapter's Standard Webhooks requests
// (verifying the signature when it has a secret), enforces a rate limit with
// 429 and Retry-After, injects faults on request, and records every accepted
// send so a test can count duplicates by idempotency key.
//
// Everything is in memory: a restart forgets every send and counter. The
// admin endpoints have no authentication; the sandbox must never listen where
// anyone but its operator can reach it.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/provider/webhook"
)

// Defaults for Config.
const (
	// DefaultAddr is where `owedctl provider serve` listens: loopback only,
	// because the admin endpoints are unauthenticated.
	DefaultAddr = "127.0.0.1:8089"
	// DefaultRate matches the worker's default pace, so a well-behaved worker
	// pool rarely sees a 429 and a misbehaving one sees many.
	DefaultRate = "40/m"
	// DefaultBurst lets three requests through at once. A burst of one would
	// refuse a worker pacing at exactly the rate whenever network jitter
	// brought two requests closer than the interval; three absorbs three
	// intervals (4.5 s at 40/m) of jitter without changing the long-run rate.
	DefaultBurst = 3
	// DefaultMaxSends bounds the sends remembered for /sends and duplicate
	// detection; the oldest are forgotten first.
	DefaultMaxSends = 100_000
	// DefaultStatsMinutes is how many minutes of per-minute counts /stats
	// returns.
	DefaultStatsMinutes = 60
	// MaxBodyBytes bounds a request body. The ledger caps a payload at 64 KiB
	// and the envelope adds little, so a larger body is not owed's.
	MaxBodyBytes = 1 << 20
	// DefaultSendsLimit and MaxSendsLimit bound one /sends answer.
	DefaultSendsLimit = 100
	MaxSendsLimit     = 1000
)

// Fault kinds, the keys of Stats.Faults.
const (
	FaultError     = "error"
	FaultTimeout   = "timeout"
	FaultStorm     = "storm"
	FaultPermanent = "permanent"
)

// Config configures a Server. Zero fields take the defaults above.
type Config struct {
	// Rate is the request budget, enforced across all callers.
	Rate  Rate
	Burst int
	// Secret, when set, is the Standard Webhooks secret ("whsec_…") every
	// request must be signed with; an unsigned or badly signed request gets
	// 401.
	Secret string
	// Tolerance is the accepted clock skew of webhook-timestamp.
	Tolerance time.Duration
	Faults    Faults
	MaxSends  int
	// StatsMinutes is the length of Stats.PerMinute.
	StatsMinutes int
	// Now and Rand are injectable so tests control time and fault draws;
	// time.Now and a uniform [0, 1) source when nil.
	Now  func() time.Time
	Rand func() float64
	Log  zerolog.Logger
}

// Server is the sandbox provider, an http.Handler.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	permRE  *regexp.Regexp
	baseCtx context.Context
	stop    context.CancelFunc

	mu         sync.Mutex
	faults     Faults
	stormUntil time.Time
	limiter    *limiter
	rec        *recorder
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Rate == (Rate{}) {
		r, err := ParseRate(DefaultRate)
		if err != nil {
			return nil, err
		}
		cfg.Rate = r
	}
	if cfg.Rate.Count < 1 || cfg.Rate.Per <= 0 || cfg.Rate.Interval() <= 0 {
		return nil, fmt.Errorf("rate: %d per %s is not a positive rate", cfg.Rate.Count, cfg.Rate.Per)
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Burst < 1 {
		return nil, fmt.Errorf("burst: must be at least 1 (got %d)", cfg.Burst)
	}
	if cfg.Secret != "" {
		if _, err := webhook.ParseSecret(cfg.Secret); err != nil {
			return nil, fmt.Errorf("secret: %v", err)
		}
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	if cfg.MaxSends <= 0 {
		cfg.MaxSends = DefaultMaxSends
	}
	if cfg.StatsMinutes <= 0 {
		cfg.StatsMinutes = DefaultStatsMinutes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, baseCtx: ctx, stop: stop, limiter: newLimiter(cfg.Rate, cfg.Burst),
		rec: newRecorder(cfg.MaxSends, cfg.StatsMinutes)}
	if err := s.SetFaults(cfg.Faults); err != nil {
		return nil, err
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /", s.handleSend)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /stats", s.handleStats)
	s.mux.HandleFunc("GET /sends", s.handleSends)
	s.mux.HandleFunc("GET /admin/faults", s.handleGetFaults)
	s.mux.HandleFunc("POST /admin/faults", s.handleSetFaults)
	s.mux.HandleFunc("POST /admin/reset", s.handleReset)
	return s, nil
}

// ServeHTTP routes a request: sends are POSTed to any path not listed here.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Server timeouts. WriteTimeout leaves room for the longest injected hang so
// a timeout fault ends the way it was configured, not by the server's clock.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = MaxTimeoutHang + 10*time.Second
	idleTimeout       = 60 * time.Second
	// ShutdownTimeout bounds a graceful shutdown; connections still open
	// after it are closed.
	ShutdownTimeout = 10 * time.Second
)

// Serve serves on ln until ctx is cancelled, then shuts down gracefully: hung
// fault handlers are released first, then in-flight requests get up to
// ShutdownTimeout to finish. A Server serves once; after Serve returns, build
// a new one.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.stop()
		return err
	case <-ctx.Done():
	}
	s.stop()
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.With().Str("key", r.Header.Get(webhook.HeaderID)).Logger()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.reject(w, log, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes), badRequests)
			return
		}
		s.reject(w, log, http.StatusBadRequest, "unreadable_body", err.Error(), badRequests)
		return
	}
	if s.cfg.Secret != "" {
		if err := webhook.Verify(s.cfg.Secret, r.Header, body, s.cfg.Now(), s.cfg.Tolerance); err != nil {
			s.reject(w, log, http.StatusUnauthorized, "invalid_signature", err.Error(), unauthorized)
			return
		}
	}
	key := r.Header.Get(webhook.HeaderID)
	if key == "" {
		s.reject(w, log, http.StatusBadRequest, "missing_idempotency_key", "the webhook-id header is required", badRequests)
		return
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		s.reject(w, log, http.StatusBadRequest, "invalid_payload", "body is not a webhook payload: "+err.Error(), badRequests)
		return
	}
	if p.Data.NotificationID == 0 {
		p.Data.NotificationID, _ = strconv.ParseInt(r.Header.Get(webhook.HeaderNotificationID), 10, 64)
	}
	if p.Data.Tenant == "" {
		p.Data.Tenant = r.Header.Get(webhook.HeaderTenant)
	}

	// Everything from here to the decision runs under one lock, so that the
	// limiter, the fault draw and the record see one consistent order.
	s.mu.Lock()
	now := s.cfg.Now()
	f := s.faults
	if now.Before(s.stormUntil) {
		s.rec.faults[FaultStorm]++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(f.StormRetryAfterSeconds))
		s.reply(w, log, http.StatusTooManyRequests, "rate_limited", "429 storm injected")
		return
	}
	if ok, wait := s.limiter.allow(now); !ok {
		s.rec.rateLimited++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(wait), 10))
		s.reply(w, log, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("over the sandbox rate of %s (burst %d)", s.cfg.Rate, s.cfg.Burst))
		return
	}
	if s.permRE != nil && s.permRE.MatchString(p.Data.Recipient) {
		s.rec.faults[FaultPermanent]++
		s.mu.Unlock()
		s.reply(w, log, http.StatusUnprocessableEntity, "recipient_rejected",
			"recipient matches the permanent-failure pattern")
		return
	}
	draw := s.cfg.Rand()
	switch {
	case draw < f.ErrorRate:
		s.rec.faults[FaultError]++
		s.mu.Unlock()
		s.reply(w, log, http.StatusServiceUnavailable, "injected_error", "5xx injected")
		return
	case draw < f.ErrorRate+f.TimeoutRate:
		s.rec.faults[FaultTimeout]++
		s.mu.Unlock()
		s.hang(w, r, log, f)
		return
	}
	sent, dup := s.rec.accept(key, p, now)
	s.mu.Unlock()
	log.Info().Str("outcome", "accepted").Bool("duplicate", dup).Str("tenant", sent.Tenant).
		Int64("notification_id", sent.NotificationID).Str("message_id", sent.MessageID).Msg("sandbox send")
	writeJSON(w, http.StatusOK, map[string]any{"id": sent.MessageID, "duplicate": dup})
}

// hang holds the request for the configured time, as a provider that stopped
// answering would, then answers 504 or drops the connection. It returns early
// when the client gives up or the server shuts down.
func (s *Server) hang(w http.ResponseWriter, r *http.Request, log zerolog.Logger, f Faults) {
	t := time.NewTimer(time.Duration(f.TimeoutSeconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	if f.TimeoutMode == TimeoutClose {
		log.Info().Str("outcome", "timeout_close").Msg("sandbox send")
		// ErrAbortHandler makes net/http drop the connection without a
		// response and without logging a panic.
		panic(http.ErrAbortHandler)
	}
	s.reply(w, log, http.StatusGatewayTimeout, "injected_timeout", "timeout injected")
}

// Counters for requests refused before the limiter, chosen by reject under
// the lock because Reset replaces the recorder.
func badRequests(r *recorder) *int64  { return &r.badRequests }
func unauthorized(r *recorder) *int64 { return &r.unauthorized }

// reject answers a request refused before it reached the limiter and counts
// it in the counter that counter picks.
func (s *Server) reject(w http.ResponseWriter, log zerolog.Logger, status int, code, msg string, counter func(*recorder) *int64) {
	s.mu.Lock()
	*counter(s.rec)++
	s.mu.Unlock()
	s.reply(w, log, status, code, msg)
}

func (s *Server) reply(w http.ResponseWriter, log zerolog.Logger, status int, code, msg string) {
	log.Info().Str("outcome", code).Int("status", status).Msg("sandbox send")
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleSends(w http.ResponseWriter, r *http.Request) {
	q := SendQuery{Key: r.URL.Query().Get("key"), Tenant: r.URL.Query().Get("tenant"),
		Recipient: r.URL.Query().Get("recipient")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSendsLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_limit",
				"message": fmt.Sprintf("limit: must be 1 to %d (got %q)", MaxSendsLimit, v)})
			return
		}
		q.Limit = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"sends": s.Sends(q)})
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

// maxAdminBody bounds an /admin/faults body; the object has a handful of
// fields.
const maxAdminBody = 64 << 10

func (s *Server) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_faults", "message": err.Error()})
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_faults", "message": err.Error()})
		return
	}
	s.cfg.Log.Info().Interface("faults", s.Faults()).Msg("sandbox faults set")
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	s.cfg.Log.Info().Msg("sandbox reset")
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}

// SetFaults replaces the injected faults. A storm starts now and lasts
// f.StormSeconds.
func (s *Server) SetFaults(f Faults) error {
	f.applyDefaults()
	if err := f.Validate(); err != nil {
		return err
	}
	var re *regexp.Regexp
	if f.PermanentRecipient != "" {
		// Validate compiled it already; this cannot fail.
		re = regexp.MustCompile(f.PermanentRecipient)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.permRE = f, re
	s.stormUntil = s.cfg.Now().Add(time.Duration(f.StormSeconds * float64(time.Second)))
	return nil
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Reset forgets every send and counter and refills the rate limit. The
// faults stay as they are; set them to the zero Faults to clear them.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec = newRecorder(s.cfg.MaxSends, s.cfg.StatsMinutes)
	s.limiter = newLimiter(s.cfg.Rate, s.cfg.Burst)
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.rec.stats(s.cfg.Now())
	st.Rate, st.Burst = s.cfg.Rate.String(), s.cfg.Burst
	return st
}

// Sends returns the recorded sends matching q, newest first.
func (s *Server) Sends(q SendQuery) []Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.find(q)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Timeout modes: how a hung request ends.
const (
	Timeout504   = "504"
	TimeoutClose = "close"
)

// Fault defaults and bounds.
const (
	// DefaultTimeoutSeconds outlasts the adapters' 10 s client timeout, so
	// an injected timeout is seen by the worker as its own timeout.
	DefaultTimeoutSeconds = 12
	// MaxTimeoutHang bounds an injected hang; the server's write timeout is
	// set above it.
	MaxTimeoutHang = 60 * time.Second
	// DefaultStormRetryAfterSeconds is the Retry-After of a 429 storm: long
	// enough that a worker honouring it visibly pauses.
	DefaultStormRetryAfterSeconds = 60
)

// Faults are failures the sandbox injects. ErrorRate and TimeoutRate are
// fractions of the sends that pass the rate limit, drawn from one uniform
// number, so together they are at most 1.
type Faults struct {
	// ErrorRate is the fraction of sends answered 503.
	ErrorRate float64 `json:"error_rate"`
	// TimeoutRate is the fraction of sends that hang for TimeoutSeconds and
	// then end as TimeoutMode.
	TimeoutRate    float64 `json:"timeout_rate"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// TimeoutMode is "504" (answer 504 Gateway Timeout) or "close" (drop
	// the connection without an answer).
	TimeoutMode string `json:"timeout_mode"`
	// StormSeconds answers every send 429 with StormRetryAfterSeconds for
	// this long from the moment the faults are set.
	StormSeconds           float64 `json:"storm_seconds"`
	StormRetryAfterSeconds int     `json:"storm_retry_after_seconds"`
	// PermanentRecipient is a regular expression; a send whose recipient
	// matches it is answered 422, which the webhook adapter classifies
	// permanent. "bounce" matches any recipient containing "bounce".
	PermanentRecipient string `json:"permanent_recipient"`
}

func (f *Faults) applyDefaults() {
	if f.TimeoutSeconds == 0 {
		f.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if f.TimeoutMode == "" {
		f.TimeoutMode = Timeout504
	}
	if f.StormRetryAfterSeconds == 0 {
		f.StormRetryAfterSeconds = DefaultStormRetryAfterSeconds
	}
}

// Validate reports the first invalid field by its JSON name.
func (f Faults) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"timeout_rate", f.TimeoutRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("%s: must be a fraction from 0 to 1 (got %v)", r.name, r.v)
		}
	}
	if f.ErrorRate+f.TimeoutRate > 1 {
		return fmt.Errorf("error_rate + timeout_rate: must be at most 1 (got %v + %v)", f.ErrorRate, f.TimeoutRate)
	}
	if !(f.TimeoutSeconds >= 0 && f.TimeoutSeconds <= MaxTimeoutHang.Seconds()) {
		return fmt.Errorf("timeout_seconds: must be from 0 to %v (got %v)", MaxTimeoutHang.Seconds(), f.TimeoutSeconds)
	}
	if f.TimeoutMode != Timeout504 && f.TimeoutMode != TimeoutClose {
		return fmt.Errorf("timeout_mode: must be %q or %q (got %q)", Timeout504, TimeoutClose, f.TimeoutMode)
	}
	// A storm longer than a day is a forgotten setting, not a drill.
	if !(f.StormSeconds >= 0 && f.StormSeconds <= (24*time.Hour).Seconds()) {
		return fmt.Errorf("storm_seconds: must be from 0 to 86400 (got %v)", f.StormSeconds)
	}
	if f.StormRetryAfterSeconds < 1 || f.StormRetryAfterSeconds > int(time.Hour/time.Second) {
		return fmt.Errorf("storm_retry_after_seconds: must be from 1 to 3600 (got %d)", f.StormRetryAfterSeconds)
	}
	if _, err := regexp.Compile(f.PermanentRecipient); err != nil {
		return fmt.Errorf("permanent_recipient: not a regular expression: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return nil
}
