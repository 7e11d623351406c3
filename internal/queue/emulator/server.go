package emulator

import (
	"context"
	"net"
	"time"

	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/service"
)

// Server timeouts. The write timeout must outlast the longest long poll, or
// a consume waiting its full 20 s would be cut off before it answers.
const (
	// readTimeout allows a full publish_batch (about 25 MiB) on a slow link.
	readTimeout     = 60 * time.Second
	writeTimeout    = wire.MaxWaitSeconds*time.Second + 30*time.Second
	shutdownTimeout = 15 * time.Second
)

// Serve serves e on ln until ctx is cancelled, then ends waiting consumes
// and shuts down gracefully, letting requests in progress finish.
func (e *Emulator) Serve(ctx context.Context, ln net.Listener) error {
	return service.Server{
		Handler:         e,
		Log:             e.log,
		Name:            "queue emulator",
		ReadTimeout:     readTimeout,
		WriteTimeout:    writeTimeout,
		ShutdownTimeout: shutdownTimeout,
		// Each endpoint limits its own body: a publish_batch may carry
		// about 25 MiB, more than the service default.
		MaxBodyBytes:   -1,
		BeforeShutdown: e.Drain,
	}.Serve(ctx, ln)
}
