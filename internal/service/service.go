// Package service holds what every owed process shares: the start-up (Start:
// logger, signal context, database pool, the database role check CheckRole,
// the check that commits are durable CheckDurable, the listener and the
// operator listener for /metrics and /readyz, which answers only the Hosts
// it knows, hosts.go), an HTTP
// server with timeouts, a body limit and graceful shutdown (Server,
// Process.Serve), the cache of scrape-time readings (Cache) and the one
// hashed, constant-time bearer check (Bearer). It knows nothing about the
// ledger or the queue, it never starts a service as a role row-level
// security does not bind (unless OWED_ALLOW_INSECURE_DATABASE_ROLE says so,
// loudly) nor on commits a crash can lose (unless OWED_ALLOW_ASYNC_COMMIT
// says so, on /readyz too), and it never logs or returns a secret or a database URL's
// password.
package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

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

// LimitBody caps every request body at n bytes; reading past it fails and
// handlers answer 413.
func LimitBody(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			// The API's documented error (docs/api.md, code body_too_large),
			// as JSON, not http.Error's text/plain.
			h := w.Header()
			h.Set(HeaderRequestID, RequestID(r))
			h.Set("Content-Type", "application/json; charset=utf-8")
			h.Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			fmt.Fprintf(w, `{"error":{"code":"body_too_large","message":"the body exceeds the limit of %d bytes"}}`+"\n", n)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		h.ServeHTTP(w, r)
	})
}
