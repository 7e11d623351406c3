package main

import (
	"context"
	"fmt"
	"os"

	"github.com/owedhq/owed/internal/queue/jetstream/jsserver"
	"github.com/owedhq/owed/internal/service"
)

// queueServeJetStream runs a NATS server with JetStream on loopback until
// SIGTERM or Ctrl-C: the JetStream server of `owedctl dev --queue
// jetstream` and of the drill, which run it as a child they can kill -9.
func queueServeJetStream(ctx context.Context, args []string) error {
	fs := newFlags("queue serve-jetstream", "queue serve-jetstream --addr HOST:PORT --store DIR",
		"owedctl queue serve-jetstream --addr 127.0.0.1:4222 --store .owed/dev/nats   # then OWED_QUEUE_BACKEND=jetstream OWED_NATS_URL=nats://127.0.0.1:4222")
	cfg := jsserver.Config{}
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:4222", "loopback address clients connect to (port 0 picks one); the server has no authentication")
	fs.StringVar(&cfg.StoreDir, "store", "", "folder of JetStream's file store, kept across restarts (required)")
	level := fs.String("log-level", service.LogLevelDefault, "log level: debug logs the server's protocol events")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	log, err := service.NewLogger(os.Stderr, "jetstream", *level)
	if err != nil {
		return usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", *level)}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	cfg.Log = log
	srv, err := jsserver.Start(cfg)
	if err != nil {
		return err
	}
	log.Info().Str("url", srv.ClientURL()).Str("store", cfg.StoreDir).Msg("jetstream: serving")
	<-ctx.Done()
	srv.Shutdown()
	log.Info().Msg("jetstream: stopped")
	return nil
}
