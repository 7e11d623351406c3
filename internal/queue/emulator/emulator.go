// Package emulator is a durable local implementation of owed's REST queue
// contract (docs/queue-api.md): an http.Handler over a PostgreSQL schema of
// its own, owed_queue, so one machine runs the whole system and tests
// exercise the real client.
//
// Every request is one committed statement before it is answered, so killing
// the emulator (even with SIGKILL) loses no message and forgets no key.
// FOR UPDATE SKIP LOCKED makes concurrent consumers, in one process or many,
// safe. The emulator never touches the ledger's tables and never logs its
// token.
//
// Every decision about time (visibility, delays, the dedup window) is taken
// by the database's clock, now() in store.go; Go code only measures real
// time (a long poll's wait).
//
// Layout: emulator.go (configuration and lifecycle), server.go (Serve, over
// service.Server), http.go (the endpoint table, authentication, fault
// injection, answers), validate.go (the checks every endpoint shares),
// publish.go, consume.go and deadletters.go (one file per group of
// endpoints), store.go (every SQL statement), schema.go and faults.go.
package emulator

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/service"
)

// Defaults of the emulator's settings.
const (
	DefaultAddr              = "127.0.0.1:8181"
	DefaultDedupWindow       = 24 * time.Hour
	DefaultVisibilityTimeout = 30 * time.Second
	// DefaultMaxReceives is high on purpose: owed's ledger counts attempts
	// and decides dead letters, and every return to the queue (a pace wait,
	// a 429) is a receive on a real queue. The emulator's own
	// dead-lettering is only a safety net for a message no worker can
	// settle, as SQS's maxReceiveCount is.
	DefaultMaxReceives = 1000
	DefaultMaxConns    = 16
	// DefaultThrottleStatus and DefaultRetryAfterSeconds shape an injected
	// throttle that says nothing else.
	DefaultThrottleStatus    = http.StatusTooManyRequests
	DefaultRetryAfterSeconds = 1
)

const (
	// recheckInterval is how often a waiting consume looks again without
	// being woken: delayed messages and expired visibility timeouts become
	// visible without any publish, and another emulator process on the same
	// database cannot wake this one.
	recheckInterval = 200 * time.Millisecond
	// pruneInterval is how often expired idempotency keys are forgotten.
	pruneInterval = time.Minute
	// defaultDeadLetterPage is the page size when the list asks for none.
	defaultDeadLetterPage = 50
)

// Config is the emulator's configuration, read by `owedctl queue serve`
// from OWED_QUEUE_* variables (envconfig, prefix "OWED") and flags.
type Config struct {
	// Addr is the listen address.
	Addr string `envconfig:"QUEUE_ADDR" default:"127.0.0.1:8181"`
	// Token is the bearer token every /queue request must carry.
	Token string `envconfig:"QUEUE_TOKEN"`
	// FaultToken is the bearer token of /admin/faults, which changes how
	// every client is answered: a queue client's token does not open it.
	// Empty turns run-time fault injection off (the start-up faults still
	// apply).
	FaultToken string `envconfig:"QUEUE_FAULT_TOKEN"`
	// DatabaseURL names the PostgreSQL database holding the owed_queue schema.
	DatabaseURL string `envconfig:"QUEUE_DATABASE_URL"`
	// Queues, when set, is the only queue names accepted; empty accepts any
	// valid name (what the contract suite needs).
	Queues []string `envconfig:"QUEUE_QUEUES"`
	// DedupWindow is how long an idempotency key is remembered.
	DedupWindow time.Duration `envconfig:"QUEUE_DEDUP_WINDOW" default:"24h"`
	// VisibilityTimeout applies to consumes that ask for none.
	VisibilityTimeout time.Duration `envconfig:"QUEUE_VISIBILITY_TIMEOUT" default:"30s"`
	// MaxReceives is how many counted failures dead-letter a message: a
	// safety net (see DefaultMaxReceives), never what decides a dead letter
	// for owed.
	MaxReceives int `envconfig:"QUEUE_MAX_RECEIVES" default:"1000"`
	// SynchronousCommit keeps PostgreSQL's synchronous_commit on for the
	// emulator's sessions. Off (the default) is several times faster; an
	// emulator crash still loses nothing, only a PostgreSQL or machine
	// crash can lose the last few hundred milliseconds of commits.
	SynchronousCommit bool `envconfig:"QUEUE_SYNCHRONOUS_COMMIT" default:"false"`
	// MaxConns bounds the emulator's database connections.
	MaxConns int `envconfig:"QUEUE_MAX_CONNS" default:"16"`
	// Faults are the injected failures the emulator starts with.
	Faults
}

// DefaultConfig returns the defaults envconfig would apply, for callers that
// build a Config in code (tests, the benchmark).
func DefaultConfig() Config {
	return Config{
		Addr:              DefaultAddr,
		DedupWindow:       DefaultDedupWindow,
		VisibilityTimeout: DefaultVisibilityTimeout,
		MaxReceives:       DefaultMaxReceives,
		MaxConns:          DefaultMaxConns,
		Faults:            Faults{ThrottleStatus: DefaultThrottleStatus, ThrottleScope: ScopePublish, RetryAfterSeconds: DefaultRetryAfterSeconds},
	}
}

// Validate names the first unusable setting and its variable.
func (c Config) Validate() error {
	switch {
	case c.Token == "":
		return errors.New("OWED_QUEUE_TOKEN is not set: the emulator requires a bearer token")
	case c.FaultToken != "" && c.FaultToken == c.Token:
		return errors.New("OWED_QUEUE_FAULT_TOKEN is OWED_QUEUE_TOKEN: the fault endpoint needs a secret queue clients do not hold")
	case c.DatabaseURL == "":
		return errors.New("OWED_QUEUE_DATABASE_URL is not set: name the PostgreSQL database for the owed_queue schema")
	case c.DedupWindow <= 0:
		return fmt.Errorf("OWED_QUEUE_DEDUP_WINDOW=%s: want a positive duration such as 24h", c.DedupWindow)
	case c.VisibilityTimeout < time.Second || c.VisibilityTimeout > wire.MaxVisibilitySeconds*time.Second:
		return fmt.Errorf("OWED_QUEUE_VISIBILITY_TIMEOUT=%s: want 1s..12h", c.VisibilityTimeout)
	case c.MaxReceives < 1:
		return fmt.Errorf("OWED_QUEUE_MAX_RECEIVES=%d: want 1 or more", c.MaxReceives)
	case c.MaxConns < 1:
		return fmt.Errorf("OWED_QUEUE_MAX_CONNS=%d: want 1 or more", c.MaxConns)
	}
	for _, q := range c.Queues {
		if !rest.ValidQueueName(q) {
			return fmt.Errorf("OWED_QUEUE_QUEUES: %q is not a queue name: want 1-80 letters, digits, '-' or '_'", q)
		}
	}
	return c.Faults.Validate()
}

// Emulator serves the queue contract. Build it with Open, call Start, serve
// it as an http.Handler (or with Serve), and Stop it.
type Emulator struct {
	cfg    Config
	db     *sql.DB
	store  *store
	log    zerolog.Logger
	bearer service.Bearer
	// faultBearer checks /admin/faults (Config.FaultToken).
	faultBearer service.Bearer
	queues      map[string]bool
	faults      atomic.Pointer[Faults]
	waiters     notifier
	mux         *http.ServeMux

	closing   chan struct{}
	closeOnce sync.Once
	stopJan   context.CancelFunc
	janDone   chan struct{}
	startOnce sync.Once
}

var _ http.Handler = (*Emulator)(nil)

// Open validates cfg, connects to cfg.DatabaseURL and creates or upgrades
// the owed_queue schema.
func Open(ctx context.Context, cfg Config, log zerolog.Logger) (*Emulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	db, err := openDB(cfg)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("emulator: connect to OWED_QUEUE_DATABASE_URL: %w", config.RedactError(err, cfg.DatabaseURL))
	}
	if err := ensureSchema(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	st, err := newStore(ctx, db, cfg.DedupWindow, cfg.MaxReceives)
	if err != nil {
		db.Close()
		return nil, err
	}
	e := &Emulator{
		cfg:    cfg,
		db:     db,
		store:  st,
		log:    log,
		bearer: service.NewBearer(cfg.Token),
		// faultBearer of an empty FaultToken matches nothing.
		faultBearer: service.NewBearer(cfg.FaultToken),
		closing:     make(chan struct{}),
	}
	if len(cfg.Queues) > 0 {
		e.queues = make(map[string]bool, len(cfg.Queues))
		for _, q := range cfg.Queues {
			e.queues[q] = true
		}
	}
	f := cfg.Faults
	e.faults.Store(&f)
	e.routes()
	return e, nil
}

// openDB opens the pool with the emulator's session settings applied to
// every connection it makes.
func openDB(cfg Config) (*sql.DB, error) {
	conn, err := pq.NewConnector(cfg.DatabaseURL)
	if err != nil {
		// pq's parse error quotes the whole URL, password and all.
		return nil, fmt.Errorf("emulator: OWED_QUEUE_DATABASE_URL is not a valid postgres URL: %w", config.RedactError(err, cfg.DatabaseURL))
	}
	setup := "SET application_name = 'owed-queue-emulator'"
	if !cfg.SynchronousCommit {
		setup += "; SET synchronous_commit = off"
	}
	db := sql.OpenDB(sessionConnector{Connector: conn, setup: setup})
	db.SetMaxOpenConns(cfg.MaxConns)
	db.SetMaxIdleConns(cfg.MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// sessionConnector runs setup on each new connection.
type sessionConnector struct {
	driver.Connector
	setup string
}

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("emulator: the postgres driver cannot run session setup")
	}
	if _, err := ex.ExecContext(ctx, c.setup, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("emulator: session setup: %w", err)
	}
	return conn, nil
}

// Start begins the background pruning of expired idempotency keys. It is
// safe to call more than once.
func (e *Emulator) Start(ctx context.Context) error {
	e.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(ctx)
		e.stopJan, e.janDone = cancel, make(chan struct{})
		go e.janitor(ctx)
	})
	return nil
}

// Stop ends waiting consumes (they answer with no messages), stops the
// background work and closes the database. It is safe to call twice or
// before Start.
func (e *Emulator) Stop() {
	e.Drain()
	e.startOnce.Do(func() {}) // A later Start must not begin work on a closed database.
	if e.stopJan != nil {
		e.stopJan()
		<-e.janDone
		e.stopJan = nil
	}
	e.store.close()
	e.db.Close()
}

// Drain makes waiting consumes answer now with no messages, so a graceful
// shutdown does not wait out every long poll.
func (e *Emulator) Drain() { e.closeOnce.Do(func() { close(e.closing) }) }

// Faults returns the injected failures in force.
func (e *Emulator) Faults() Faults { return *e.faults.Load() }

// SetFaults replaces the injected failures.
func (e *Emulator) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	e.faults.Store(&f)
	e.log.Info().Interface("faults", f).Msg("queue emulator: faults set")
	return nil
}

func (e *Emulator) janitor(ctx context.Context) {
	defer close(e.janDone)
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	for {
		n, err := e.store.pruneKeys(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.log.Error().Err(err).Msg("queue emulator: prune idempotency keys")
		case n > 0:
			e.log.Info().Int("pruned_keys", n).Msg("queue emulator: forgot idempotency keys past the dedup window")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// notifier wakes consumes waiting on a queue. A waiter takes the queue's
// channel before it looks at the database, so a publish that lands between
// the look and the wait still wakes it.
type notifier struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

func (n *notifier) wait(queue string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans == nil {
		n.chans = make(map[string]chan struct{})
	}
	ch, ok := n.chans[queue]
	if !ok {
		ch = make(chan struct{})
		n.chans[queue] = ch
	}
	return ch
}

func (n *notifier) notify(queue string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.chans[queue]; ok {
		close(ch)
		delete(n.chans, queue)
	}
}
