// Package jsserver runs one NATS server with JetStream enabled on a
// loopback address, its file store in a local folder: the JetStream server
// of the one-machine stack. `owedctl queue serve-jetstream` runs it as a
// process of its own, so `owedctl dev --queue jetstream` and the drill can
// kill -9 it and start it again on the same store.
//
// It is for development and tests only: one node, no authentication, no
// TLS. It must never listen beyond loopback; a production install runs
// nats-server itself (deploy/, docs/queues.md).
package jsserver

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// readyTimeout bounds how long the server may take to accept clients,
// JetStream's recovery of an existing store included.
const readyTimeout = time.Minute

// Config is where the server listens and keeps its store.
type Config struct {
	// Addr is a loopback host:port, e.g. 127.0.0.1:4222; port 0 picks a
	// free one.
	Addr string
	// StoreDir holds JetStream's file store; it survives a restart, so the
	// streams and their messages do.
	StoreDir string
	// Log receives the server's own log lines; debug lines only when it
	// is at debug level.
	Log zerolog.Logger
}

// Server is one running server.
type Server struct{ srv *server.Server }

// Validate names the flag behind the first unusable setting.
func (c Config) Validate() error {
	_, _, err := c.hostPort()
	return err
}

func (c Config) hostPort() (host string, port int, err error) {
	host, portStr, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return "", 0, fmt.Errorf("--addr %q: want a loopback host:port like 127.0.0.1:4222", c.Addr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", 0, fmt.Errorf("--addr %q: %s is not a loopback address; this server has no authentication", c.Addr, host)
	}
	port, err = strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("--addr %q: %q is not a port", c.Addr, portStr)
	}
	if c.StoreDir == "" {
		return "", 0, fmt.Errorf("--store: a folder for JetStream's file store is required")
	}
	return host, port, nil
}

// Start checks cfg, starts the server and returns once it accepts clients.
// The server logs to cfg.Log and ignores signals: the caller stops it with
// Shutdown.
func Start(cfg Config) (*Server, error) {
	host, port, err := cfg.hostPort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("--store %s: %w", cfg.StoreDir, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "owed-dev",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	srv.SetLoggerV2(logger{cfg.Log}, cfg.Log.GetLevel() <= zerolog.DebugLevel, false, false)
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats-server on %s did not accept clients within %s", cfg.Addr, readyTimeout)
	}
	return &Server{srv: srv}, nil
}

// ClientURL is the URL clients connect to, e.g. nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Shutdown stops the server gracefully: JetStream flushes its store, so a
// restart finds every stream and message. It waits until the server is
// down.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// logger writes the server's log lines as structured lines, one message
// each. A fatal line ends the process, as it ends a standalone
// nats-server: the server does not carry on after one.
type logger struct{ log zerolog.Logger }

func (l logger) Noticef(format string, v ...any) { l.log.Info().Msgf(format, v...) }
func (l logger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l logger) Fatalf(format string, v ...any)  { l.log.Fatal().Msgf(format, v...) }
func (l logger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l logger) Debugf(format string, v ...any)  { l.log.Debug().Msgf(format, v...) }
func (l logger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
