package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the postgres driver
	"github.com/rs/zerolog"
)

// Basics are the settings every owed service starts with. Each service reads
// them from the same OWED_* variables, with its own defaults.
type Basics struct {
	LogLevel    string // OWED_LOG_LEVEL
	DatabaseURL string // OWED_DATABASE_URL
	DBMaxConns  int    // OWED_DB_MAX_CONNS
	ListenAddr  string // OWED_LISTEN_ADDR
}

// Process is a started service: what its main needs before it builds the
// service itself.
type Process struct {
	// Log is the service's JSON logger.
	Log zerolog.Logger
	// Ctx ends at the first SIGINT or SIGTERM (see SignalContext) or at
	// Shutdown.
	Ctx context.Context
	// DB is the pooled, pinged database.
	DB *sql.DB
	// Listener is OWED_LISTEN_ADDR, open and not yet served.
	Listener net.Listener
	stop     context.CancelFunc
}

// Start is every service's start-up, in this order: the logger, the signal
// context, the database pool and the listener. On an error it closes again
// what it opened.
func Start(name string, b Basics) (*Process, error) {
	log, err := NewLogger(os.Stderr, name, b.LogLevel)
	if err != nil {
		return nil, err
	}
	ctx, stop := SignalContext()
	db, err := OpenDB(ctx, b.DatabaseURL, b.DBMaxConns)
	if err != nil {
		stop()
		return nil, err
	}
	ln, err := Listen(b.ListenAddr, "OWED_LISTEN_ADDR")
	if err != nil {
		db.Close()
		stop()
		return nil, err
	}
	return &Process{Log: log, Ctx: ctx, DB: db, Listener: ln, stop: stop}, nil
}

// Shutdown ends Ctx as a first signal would, so a service whose own work
// ended stops its HTTP server too.
func (p *Process) Shutdown() { p.stop() }

// Close ends Ctx and closes the listener (unless a server already did) and
// the database pool.
func (p *Process) Close() {
	p.stop()
	p.Listener.Close()
	p.DB.Close()
}

// Main runs a command's body and, when it fails, prints "name: error" to
// stderr and exits 1.
func Main(name string, run func() error) {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// LogLevelDefault is the level a service logs at unless told otherwise.
const LogLevelDefault = "info"

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
