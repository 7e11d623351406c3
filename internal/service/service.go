// Package service holds what every owed process shares: logging, the
// database pool, and an HTTP server with timeouts, a body limit and graceful
// shutdown. It knows nothing about the ledger or the queue.
package service

import (
	"context"
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

// Serve runs handler on ln until ctx is cancelled, then shuts down
// gracefully, letting in-flight requests finish within ShutdownTimeout.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, log zerolog.Logger) error {
	srv := &http.Server{
		Handler:           LimitBody(handler, MaxBodyBytes),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Msg("listening")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	log.Info().Msg("shutting down")
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
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

// BearerOK reports whether r carries "Authorization: Bearer <secret>",
// comparing in constant time so the secret cannot be guessed byte by byte.
func BearerOK(r *http.Request, secret string) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if secret == "" || len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(h[len(prefix):]), []byte(secret)) == 1
}

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
