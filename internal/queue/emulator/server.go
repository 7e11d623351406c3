package emulator

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/owedhq/owed/internal/queue/wire"
)

// Server timeouts. The write timeout must outlast the longest long poll, or
// a consume waiting its full 20 s would be cut off before it answers.
const (
	readHeaderTimeout = 10 * time.Second
	// readTimeout allows a full publish_batch (about 25 MiB) on a slow link.
	readTimeout     = 60 * time.Second
	writeTimeout    = wire.MaxWaitSeconds*time.Second + 30*time.Second
	idleTimeout     = 2 * time.Minute
	shutdownTimeout = 15 * time.Second
)

// Serve serves e on ln until ctx is cancelled, then ends waiting consumes
// and shuts down gracefully, letting requests in progress finish.
func (e *Emulator) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	e.log.Info().Str("addr", ln.Addr().String()).Msg("queue emulator: listening")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	e.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	e.log.Info().Msg("queue emulator: stopped")
	return err
}
