package service

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
)

// Basics are the settings every owed service starts with. Each service reads
// them from the same OWED_* variables, with its own defaults.
type Basics struct {
	LogLevel    string // OWED_LOG_LEVEL
	DatabaseURL string // OWED_DATABASE_URL
	DBMaxConns  int    // OWED_DB_MAX_CONNS
	ListenAddr  string // OWED_LISTEN_ADDR
	Operations
}

// Operations are the start-up settings every service shares that its own
// configuration does not carry. Read them with LoadOperations.
type Operations struct {
	// MetricsAddr is OWED_METRICS_ADDR, the operator listener: /metrics,
	// /readyz and /healthz. Empty serves /metrics and /readyz on the main
	// listener, which only a service whose main listener is itself
	// operational (the worker's) may do.
	MetricsAddr string `envconfig:"METRICS_ADDR"`
	// OperatorHosts is OWED_OPERATOR_HOSTS: the host names the operator
	// listener answers to besides IP addresses, localhost and its own bind
	// address's (hosts.go); a request for any other Host is refused, so DNS
	// rebinding cannot read it from a browser.
	OperatorHosts []string `envconfig:"OPERATOR_HOSTS"`
	// AllowInsecureRole is OWED_ALLOW_INSECURE_DATABASE_ROLE: start even
	// when CheckRole refuses the database role, logging every problem at
	// error level. For a development database only.
	AllowInsecureRole bool `envconfig:"ALLOW_INSECURE_DATABASE_ROLE"`
	// AllowAsyncCommit is OWED_ALLOW_ASYNC_COMMIT: start even when
	// CheckDurable finds that a crash or a failover can lose commits,
	// logging it at error level and adding it to /readyz as a warning.
	AllowAsyncCommit bool `envconfig:"ALLOW_ASYNC_COMMIT"`
}

// LoadOperations reads Operations from the environment, MetricsAddr
// defaulting to metricsAddr. A service with a default operator listener
// (metricsAddr not empty) keeps one: its main listener is public, so an
// empty OWED_METRICS_ADDR is refused rather than putting /metrics there.
func LoadOperations(metricsAddr string) (Operations, error) {
	o := Operations{MetricsAddr: metricsAddr}
	if err := config.Process("OWED", &o); err != nil {
		return o, fmt.Errorf("configuration: %w", err)
	}
	if metricsAddr != "" && o.MetricsAddr == "" {
		return o, fmt.Errorf("OWED_METRICS_ADDR is empty: this service's main listener is public, so /metrics and /readyz need their own listener (default %s)", metricsAddr)
	}
	if _, err := NewHosts(o.OperatorHosts, o.MetricsAddr); err != nil {
		return o, err
	}
	return o, nil
}

// Process is a started service: what its main needs before it builds the
// service itself.
type Process struct {
	// Log is the service's JSON logger.
	Log zerolog.Logger
	// Ctx ends at the first SIGINT or SIGTERM (see SignalContext) or at
	// Shutdown.
	Ctx context.Context
	// DB is the pooled, pinged database, as a role CheckRole accepted.
	DB *sql.DB
	// Listener is OWED_LISTEN_ADDR, open and not yet served.
	Listener net.Listener
	// Metrics is OWED_METRICS_ADDR, open and not yet served; nil when the
	// service has no operator listener of its own.
	Metrics net.Listener
	// ShutdownTimeout is how long Serve lets the main listener's in-flight
	// requests finish after Ctx ends (zero: the package's ShutdownTimeout).
	// A service whose requests run longer (the sweeper's sweep) sets it
	// before Serve.
	ShutdownTimeout time.Duration
	// Warning is what the service runs without that /readyz must show
	// (CheckDurable's problem under OWED_ALLOW_ASYNC_COMMIT); Serve adds it
	// to every /readyz answer.
	Warning string
	// hosts are the names the operator routes answer to (OperatorHosts).
	hosts Hosts
	stop  context.CancelFunc
}

// Start is every service's start-up, in this order: the logger, the signal
// context, the database pool, its role check (see CheckRole) and its
// durability check (see CheckDurable), the listener and the operator
// listener. On an error it closes again what it opened.
func Start(name string, b Basics) (p *Process, err error) {
	log, err := NewLogger(os.Stderr, name, b.LogLevel)
	if err != nil {
		return nil, err
	}
	if b.MetricsAddr != "" && b.MetricsAddr == b.ListenAddr && !strings.HasSuffix(b.ListenAddr, ":0") {
		return nil, fmt.Errorf("OWED_METRICS_ADDR=%s is OWED_LISTEN_ADDR: the operator listener needs an address of its own", b.MetricsAddr)
	}
	opsAddr := b.MetricsAddr
	if opsAddr == "" {
		opsAddr = b.ListenAddr
	}
	hosts, err := NewHosts(b.OperatorHosts, opsAddr)
	if err != nil {
		return nil, err
	}
	ctx, stop := SignalContext()
	p = &Process{Log: log, Ctx: ctx, hosts: hosts, stop: stop}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if p.DB, err = OpenDB(ctx, b.DatabaseURL, b.DBMaxConns); err != nil {
		return p, err
	}
	if err = guardRole(ctx, p.DB, log, b.AllowInsecureRole); err != nil {
		return p, err
	}
	if p.Warning, err = CheckDurable(ctx, p.DB, log, b.AllowAsyncCommit); err != nil {
		return p, err
	}
	if p.Listener, err = Listen(b.ListenAddr, "OWED_LISTEN_ADDR"); err != nil {
		return p, err
	}
	if b.MetricsAddr != "" {
		if p.Metrics, err = Listen(b.MetricsAddr, "OWED_METRICS_ADDR"); err != nil {
			return p, err
		}
	}
	return p, nil
}

// Shutdown ends Ctx as a first signal would, so a service whose own work
// ended stops its HTTP server too.
func (p *Process) Shutdown() { p.stop() }

// Close ends Ctx and closes the listeners (unless a server already did) and
// the database pool.
func (p *Process) Close() {
	p.stop()
	if p.Listener != nil {
		p.Listener.Close()
	}
	if p.Metrics != nil {
		p.Metrics.Close()
	}
	if p.DB != nil {
		p.DB.Close()
	}
}

// Serve serves handler on the listener and ops (/metrics, /readyz and
// /healthz) on the operator listener until Ctx ends or either server fails,
// then shuts both down gracefully. Without an operator listener, ops's
// /metrics and /readyz are served on the listener beside handler. Either
// way ops answers only the Hosts it knows (hosts.go), and /readyz carries
// Warning (WithReadyWarning).
func (p *Process) Serve(handler, ops http.Handler) error {
	ops = p.hosts.Handler(WithReadyWarning(ops, p.Warning))
	if p.Metrics == nil {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/metrics", ops)
		mux.Handle("/readyz", ops)
		return Server{Handler: mux, Log: p.Log, ShutdownTimeout: p.ShutdownTimeout}.Serve(p.Ctx, p.Listener)
	}
	errc := make(chan error, 2)
	go func() {
		errc <- Server{Handler: handler, Log: p.Log, ShutdownTimeout: p.ShutdownTimeout}.Serve(p.Ctx, p.Listener)
	}()
	go func() { errc <- Server{Handler: ops, Log: p.Log, Name: "operator listener"}.Serve(p.Ctx, p.Metrics) }()
	first := <-errc
	p.Shutdown()
	return errors.Join(first, <-errc)
}

// Healthz answers liveness: the process is up and serving.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// HealthzOnly is the handler of a main listener that serves nothing but
// GET /healthz (the worker's).
func HealthzOnly() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", Healthz)
	return mux
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

// OpenDB opens and pings a pool. Its errors name OWED_DATABASE_URL and never
// repeat the URL's password, also when the URL does not parse (lib/pq's
// parse error quotes the whole URL).
func OpenDB(ctx context.Context, url string, maxConns int) (*sql.DB, error) {
	return OpenDatabase(ctx, "OWED_DATABASE_URL", url, maxConns)
}

// OpenDatabase is OpenDB for the database named by variable.
func OpenDatabase(ctx context.Context, variable, url string, maxConns int) (*sql.DB, error) {
	if url == "" {
		return nil, fmt.Errorf("%s is not set: give a postgres:// URL for the application role", variable)
	}
	session := SessionSettings(url)
	conn, err := pq.NewConnector(session)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid postgres URL or connection string (percent-encode special characters in the password): %w",
			variable, config.RedactError(err, url, session))
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the database (%s): %w", variable, config.RedactError(err, url))
	}
	return db, nil
}

// poolSettings are the session settings every pool OpenDatabase opens
// runs with, unless its URL sets them itself.
//
// jit=off: JIT pays for long analytical queries; owed's statements are
// short index reads, but on the partitioned ledger a statement that reads
// every month sums the estimates of every partition, and the sweep's
// survey crossed jit_above_cost: bench/ledgerscale at 1 million rows over
// twelve months saw 278 to 674 ms of compilation in each idle survey, most
// of the idle sweep (docs/scale.md).
//
// constraint_exclusion=off: the default (partition) has the planner read
// and test every CHECK constraint of every partition a statement names,
// each time it plans one; partitions are pruned by their bounds without
// it, and no owed statement relies on a CHECK to skip a table. With a
// dozen months of partitions this was a large part of planning each sweep
// statement (bench/ledgerscale at 100,000 rows over fifteen partitions:
// idle sweep 122 -> 72 ms, a 500-row lease 205 -> 172 ms;
// docs/performance.md).
var poolSettings = [][2]string{{"jit", "off"}, {"constraint_exclusion", "off"}}

// SessionSettings is url with poolSettings added, each unless url sets it
// itself. url is a postgres:// URL or a key=value connection string, as
// lib/pq reads both; lib/pq sends a URL's unknown parameters as the
// session's settings.
func SessionSettings(url string) string {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		u, err := neturl.Parse(url)
		if err != nil {
			return url
		}
		q := u.Query()
		for _, kv := range poolSettings {
			if !q.Has(kv[0]) {
				q.Set(kv[0], kv[1])
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for _, kv := range poolSettings {
		set := false
		for _, f := range strings.Fields(url) {
			if strings.HasPrefix(f, kv[0]+"=") {
				set = true
			}
		}
		if !set {
			url += " " + kv[0] + "=" + kv[1]
		}
	}
	return url
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
