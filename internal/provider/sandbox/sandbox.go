// Package sandbox is a local provider for the one-machine stack, tests and
// drills. Its Server accepts the webhook adapter's Standard Webhooks requests
// (verifying the signature when it has a secret), enforces a rate limit with
// 429 and Retry-After, injects faults on request, and records every accepted
// send so a test can count duplicates by idempotency key.
//
// The files split by concern: sandbox.go builds and serves the Server (with
// service.Server, like every owed HTTP server), send.go answers a send,
// limiter.go is the rate limit, faults.go the injected failures, admin.go the
// stats, sends and fault endpoints, record.go what was accepted, client.go
// the client tests and drills steer a running sandbox with. A rate is a
// pace.Rate, read with pace.ParseRate like the workers' OWED_PROVIDER_RATE,
// so the sandbox and the pace in front of it never disagree on what "40/m"
// means. Every decision that depends on the time reads the one clock.Clock
// the Server was built with.
//
// Everything is in memory: a restart forgets every send and counter. The
// admin endpoints have no authentication, and a send's one credential is its
// Standard Webhooks signature (webhook.Verify); the sandbox must never listen
// where anyone but its operator can reach it.
package sandbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/service"
)

// Defaults for Config.
const (
	// DefaultAddr is where `owedctl provider serve` listens: loopback only,
	// because the admin endpoints are unauthenticated.
	DefaultAddr = "127.0.0.1:8089"
	// DefaultRate is the sandbox's limit, the 40 a minute of a small real
	// account: the worker leaves the sandbox unpaced unless
	// OWED_PROVIDER_RATE is set, so a stack that sets it to this sees few
	// 429s and one that does not sees the shared pause at work. It is written
	// in pace's grammar, the one every rate in owed is read with.
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

// Config configures a Server. Zero fields take the defaults above.
type Config struct {
	// Rate is the request budget, enforced across all callers. The zero
	// Rate (pace.Unlimited) takes DefaultRate: the sandbox always limits.
	Rate  pace.Rate
	Burst int
	// Secret, when set, is the Standard Webhooks secret ("whsec_…"), or
	// several separated by spaces or commas during a rotation, every request
	// must be signed with (by any one of them); an unsigned or badly signed
	// request gets 401.
	Secret string
	// Tolerance is the accepted clock skew of webhook-timestamp.
	Tolerance time.Duration
	Faults    Faults
	MaxSends  int
	// StatsMinutes is the length of Stats.PerMinute.
	StatsMinutes int
	// Clock is the one source of "now" for the limiter, storms, signature
	// timestamps and the per-minute counts; clock.Real() when nil. Rand is
	// the fault draw, a uniform [0, 1) source when nil. Tests inject both.
	Clock clock.Clock
	Rand  func() float64
	Log   zerolog.Logger
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
	if cfg.Rate == pace.Unlimited {
		r, err := pace.ParseRate(DefaultRate)
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
		if _, err := webhook.ParseSecrets(cfg.Secret); err != nil {
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
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
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
	readTimeout  = 15 * time.Second
	writeTimeout = MaxTimeoutHang + 10*time.Second
	// ShutdownTimeout bounds a graceful shutdown; connections still open
	// after it are closed.
	ShutdownTimeout = 10 * time.Second
)

// Serve serves on ln until ctx is cancelled, then shuts down gracefully: hung
// fault handlers are released first, then in-flight requests get up to
// ShutdownTimeout to finish. A Server serves once; after Serve returns, build
// a new one.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return service.Server{
		Handler: s, Log: s.cfg.Log, Name: "sandbox",
		ReadTimeout: readTimeout, WriteTimeout: writeTimeout, ShutdownTimeout: ShutdownTimeout,
		// Sends and admin requests have limits of their own (MaxBodyBytes,
		// maxAdminBody), answered in the sandbox's error shape.
		MaxBodyBytes: -1,
		// Every request's context ends when shutdown starts, which is what
		// releases a handler hanging on an injected timeout.
		BaseContext: s.baseCtx, BeforeShutdown: s.stop,
	}.Serve(ctx, ln)
}
