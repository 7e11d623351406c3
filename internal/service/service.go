// Package service holds what every owed process shares: logging, the
// database pool, and an HTTP server with timeouts, a body limit and graceful
// shutdown. It knows nothing about the ledger or the queue.
package service

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the postgres driver
	"github.com/rs/zerolog"
)

// HTTP server defaults. WriteTimeout leaves room for a sweep's 50 s budget.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 120 * time.Second
	IdleTimeout       = 120 * time.Second
	ShutdownTimeout   = 30 * time.Second
	// MaxBodyBytes caps a request body unless a handler sets its own limit.
	MaxBodyBytes = 1 << 20
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes = 64 << 10
)

// NewLogger returns a JSON logger for service at level (debug, info, warn,
// error).
func NewLogger(w io.Writer, service, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("OWED_LOG_LEVEL=%q is not a level: one of debug, info, warn, error", level)
	}
	if w == nil {
		w = os.Stderr
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", service).Logger(), nil
}

// OpenDB opens and pings a pool. The error never repeats the URL, which may
// carry a password.
func OpenDB(ctx context.Context, url string, maxConns int) (*sql.DB, error) {
	if url == "" {
		return nil, errors.New("OWED_DATABASE_URL is not set: give a postgres:// URL for the application role")
	}
	db, err := sql.Open("postgres", url)
	if err != nil {
		return nil, errors.New("OWED_DATABASE_URL is not a valid postgres URL")
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	return db, nil
}

// Serve runs handler on ln with the default timeouts and body limit until
// ctx is cancelled, then shuts down gracefully (see Server.Serve).
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, log zerolog.Logger) error {
	return Server{Handler: handler, Log: log}.Serve(ctx, ln)
}

// Server is the one way an owed process serves HTTP: read and write
// timeouts, a body limit, and a graceful shutdown. Zero fields take the
// package defaults.
type Server struct {
	Handler http.Handler
	Log     zerolog.Logger
	// Name prefixes the log lines ("queue emulator"); empty logs plainly.
	Name string
	// ReadTimeout, WriteTimeout and ShutdownTimeout default to the package
	// constants of the same names.
	ReadTimeout, WriteTimeout, ShutdownTimeout time.Duration
	// MaxBodyBytes caps every request body (default MaxBodyBytes); a
	// negative value leaves the limit to the handler.
	MaxBodyBytes int64
	// BaseContext, when set, is the parent of every request's context.
	BaseContext context.Context
	// BeforeShutdown runs once when ctx ends (or the listener fails), before
	// in-flight requests are waited for: it releases handlers that would
	// otherwise hold the shutdown (long polls, hung fault handlers).
	BeforeShutdown func()
}

// Serve serves on ln until ctx is cancelled, then runs BeforeShutdown and
// lets in-flight requests finish within ShutdownTimeout; connections still
// open after it are closed. It returns nil after a clean shutdown.
func (s Server) Serve(ctx context.Context, ln net.Listener) error {
	h := s.Handler
	if s.MaxBodyBytes >= 0 {
		h = LimitBody(h, orDefault(s.MaxBodyBytes, MaxBodyBytes))
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       orDefault(s.ReadTimeout, ReadTimeout),
		WriteTimeout:      orDefault(s.WriteTimeout, WriteTimeout),
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	if s.BaseContext != nil {
		srv.BaseContext = func(net.Listener) context.Context { return s.BaseContext }
	}
	prefix := ""
	if s.Name != "" {
		prefix = s.Name + ": "
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.Log.Info().Str("addr", ln.Addr().String()).Msg(prefix + "listening")
	select {
	case err := <-errc:
		if s.BeforeShutdown != nil {
			s.BeforeShutdown()
		}
		return err
	case <-ctx.Done():
	}
	s.Log.Info().Msg(prefix + "shutting down")
	if s.BeforeShutdown != nil {
		s.BeforeShutdown()
	}
	sctx, cancel := context.WithTimeout(context.Background(), orDefault(s.ShutdownTimeout, ShutdownTimeout))
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%sshutdown: %w", prefix, err)
	}
	s.Log.Info().Msg(prefix + "stopped")
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Listen opens addr, turning "address already in use" into advice.
func Listen(addr, variable string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s=%s: the port is busy; stop what uses it or choose another address", variable, addr)
		}
		return nil, fmt.Errorf("%s=%s: %w", variable, addr, err)
	}
	return ln, nil
}

// LimitBody caps every request body at n bytes; reading past it fails and
// handlers answer 413.
func LimitBody(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			http.Error(w, `{"error":{"code":"too_large","message":"request body exceeds the limit"}}`, http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		h.ServeHTTP(w, r)
	})
}

// Bearer is a shared secret that requests present as
// "Authorization: Bearer <secret>". It keeps only the secret's SHA-256, and
// compares digests in constant time, so neither the secret's bytes nor its
// length can be learned by timing. The zero Bearer matches nothing.
type Bearer struct {
	sum [sha256.Size]byte
	set bool
}

// NewBearer returns the check for secret; an empty secret matches nothing.
func NewBearer(secret string) Bearer {
	if secret == "" {
		return Bearer{}
	}
	return Bearer{sum: sha256.Sum256([]byte(secret)), set: true}
}

// Matches reports whether token is the secret.
func (b Bearer) Matches(token string) bool {
	if !b.set {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], b.sum[:]) == 1
}

// Authorized reports whether r carries the secret as its bearer token.
func (b Bearer) Authorized(r *http.Request) bool {
	token, ok := BearerToken(r)
	return ok && b.Matches(token)
}

// BearerToken returns the token of r's "Authorization: Bearer <token>"
// header (the scheme is case-insensitive, surrounding blanks are ignored),
// and false when there is none.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// BearerOK reports whether r carries "Authorization: Bearer <secret>" (see
// Bearer; callers checking one secret on every request keep a Bearer).
func BearerOK(r *http.Request, secret string) bool { return NewBearer(secret).Authorized(r) }

// SignalContext returns a context cancelled by the first SIGINT or SIGTERM,
// so the process can shut down gracefully; after it, the default handlers
// are restored and a second signal ends the process at once.
func SignalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}
