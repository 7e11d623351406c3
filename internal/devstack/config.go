package devstack

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
)

// Defaults of Config: the only source of the stack's defaults, which
// `owedctl dev`'s flags show.
const (
	// DefaultDir holds the cluster, the logs and the env file, relative to
	// the current directory (the repository when run by make).
	DefaultDir = ".owed/dev"
	// DefaultTick is the sweep interval of the built-in scheduler, as the
	// hosted cron calls /cron/sweep every minute.
	DefaultTick = time.Minute
	// MaterialiseEveryTicks makes /cron/materialise run every 15 ticks:
	// every 15 minutes at the default tick, as in production.
	MaterialiseEveryTicks = 15
	// DefaultRate is the sandbox's limit and the workers' shared pace.
	DefaultRate = sandbox.DefaultRate
	// Default ports, all on loopback.
	DefaultSweeperPort = 8080
	// DefaultSweeperMetricsPort is the sweeper's operator listener
	// (/metrics, /readyz), as sweeper.MetricsAddrDefault.
	DefaultSweeperMetricsPort = 8081
	DefaultQueuePort          = 8181
	DefaultSandboxPort        = 8282
	// DefaultWorkerPort is the first worker's metrics port; each further
	// worker takes the next one, DefaultWorkers in all.
	DefaultWorkerPort = 9091
	DefaultWorkers    = 2
	// PermanentRecipient is the sandbox's permanent-failure pattern: a
	// recipient containing it is refused with 422 and must end failed and
	// dead-lettered.
	PermanentRecipient = "bounce"
	// Tenant is the tenant the seeded workload belongs to.
	Tenant = "acme"
)

// DefaultWorkerPorts returns the ports of the DefaultWorkers workers.
func DefaultWorkerPorts() []int {
	ports := make([]int, DefaultWorkers)
	for i := range ports {
		ports[i] = DefaultWorkerPort + i
	}
	return ports
}

// Timeouts and sizes of the stack's own steps.
const (
	// healthTimeout bounds how long a child may take to answer /healthz.
	healthTimeout = 30 * time.Second
	// stopTimeout is how long a child gets after SIGTERM before SIGKILL. It
	// exceeds the workers' shutdownTimeout so a worker finishes its in-flight
	// sends rather than being killed mid-send.
	stopTimeout = 15 * time.Second
	// workerShutdownTimeout is passed to the workers as OWED_SHUTDOWN_TIMEOUT.
	workerShutdownTimeout = 10 * time.Second
	// workerConcurrency keeps a dev worker small; the pace, not the pool,
	// limits a 40/m provider.
	workerConcurrency = 4
)

// Config configures a Stack. Zero fields take the defaults above.
type Config struct {
	// Dir holds the cluster (Dir/pg), the logs (Dir/logs) and Dir/env.
	Dir string
	// BinDir holds owedctl, sweeper and worker; the folder of the running
	// executable when empty.
	BinDir string
	// DatabaseURL, when set, is an existing database used instead of a
	// local cluster, for migrating, the queue emulator and the services.
	DatabaseURL string
	// Fresh wipes Dir before starting; otherwise the ledger of the last run
	// is resumed.
	Fresh bool
	// Tick is the sweep interval; materialise runs every 15 ticks.
	Tick time.Duration
	// Rate is the sandbox's limit and the workers' pace, like "40/m".
	Rate string
	// Duration, when above zero, stops the stack after that long.
	Duration time.Duration
	// Queue is the queue backend, one of backends.Names; backends.Default (the
	// emulator) when empty.
	Queue string
	// NoSeed starts the stack without the demo workload.
	NoSeed                              bool
	SweeperPort, QueuePort, SandboxPort int
	// SweeperMetricsPort is the first sweeper's operator listener; zero
	// takes a port ReservePorts holds for the stack while it runs (what
	// `owedctl dev` passes is DefaultSweeperMetricsPort).
	SweeperMetricsPort int
	WorkerPorts        []int
	// Tuning holds the settings only a fault drill changes.
	Tuning Tuning
	// Out receives the first screen and the status panel; Terminal says it
	// is a terminal, so the panel is redrawn in place.
	Out      io.Writer
	Terminal bool
}

func (c *Config) applyDefaults() error {
	dir, err := filepath.Abs(cmp.Or(c.Dir, DefaultDir))
	if err != nil {
		return fmt.Errorf("--dir %q: %w", c.Dir, err)
	}
	c.Dir = dir
	if c.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the bin folder from the running executable: %w", err)
		}
		c.BinDir = filepath.Dir(exe)
	}
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	c.Queue = cmp.Or(c.Queue, backends.Default)
	c.Rate = cmp.Or(c.Rate, DefaultRate)
	c.SweeperPort = cmp.Or(c.SweeperPort, DefaultSweeperPort)
	c.QueuePort = cmp.Or(c.QueuePort, DefaultQueuePort)
	c.SandboxPort = cmp.Or(c.SandboxPort, DefaultSandboxPort)
	if len(c.WorkerPorts) == 0 {
		c.WorkerPorts = DefaultWorkerPorts()
	}
	c.Tuning.WorkerConcurrency = cmp.Or(c.Tuning.WorkerConcurrency, workerConcurrency)
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// validate names the flag behind the first unusable setting, and returns
// the rate. The rate is read with the workers' own grammar (pace's), since
// they are what paces the sends; the sandbox needs a limit, so an unlimited
// rate is refused.
func (c Config) validate() (pace.Rate, error) {
	if c.Tick < time.Second {
		return pace.Rate{}, fmt.Errorf("--tick %s: must be at least 1s", c.Tick)
	}
	rate, err := pace.ParseRate(c.Rate)
	if err != nil {
		return pace.Rate{}, fmt.Errorf("--rate: %v", err)
	}
	if rate.IsUnlimited() {
		return pace.Rate{}, fmt.Errorf("--rate %q: the sandbox needs a limit; want <count>/<unit>, like %s", c.Rate, DefaultRate)
	}
	if err := CheckQueue(c.Queue); err != nil {
		return pace.Rate{}, err
	}
	if c.Duration < 0 {
		return pace.Rate{}, fmt.Errorf("--duration %s: must not be negative", c.Duration)
	}
	if c.Tuning.WorkerConcurrency < 1 {
		return pace.Rate{}, fmt.Errorf("worker concurrency %d: must be at least 1", c.Tuning.WorkerConcurrency)
	}
	seen := map[int]string{}
	for _, p := range c.ports() {
		if p.port < 1 || p.port > 65535 {
			return pace.Rate{}, fmt.Errorf("%s %d: want a port from 1 to 65535", p.flag, p.port)
		}
		if other, ok := seen[p.port]; ok {
			return pace.Rate{}, fmt.Errorf("%s and %s both name port %d: give each service its own port", other, p.flag, p.port)
		}
		seen[p.port] = p.flag
	}
	return rate, nil
}

type namedPort struct {
	flag string
	port int
}

func (c Config) ports() []namedPort {
	ps := []namedPort{{"--sweeper-port", c.SweeperPort}, {"--queue-port", c.QueuePort}, {"--sandbox-port", c.SandboxPort}}
	if c.SweeperMetricsPort != 0 {
		ps = append(ps, namedPort{"--sweeper-metrics-port", c.SweeperMetricsPort})
	}
	for _, p := range c.WorkerPorts {
		ps = append(ps, namedPort{"--worker-ports", p})
	}
	if c.Tuning.SecondSweeperPort != 0 {
		ps = append(ps, namedPort{"the second sweeper's port", c.Tuning.SecondSweeperPort})
	}
	return ps
}

// checkPorts fails with one line naming the first busy port and its flag,
// before anything is started.
func (c Config) checkPorts() error {
	for _, p := range c.ports() {
		ln, err := net.Listen("tcp", addr(p.port))
		if err != nil {
			return fmt.Errorf("port %d is busy (%s): stop what listens there (ss -ltnp 'sport = :%d'; an earlier owedctl dev?) or choose another port with %s",
				p.port, p.flag, p.port, p.flag)
		}
		ln.Close()
	}
	return nil
}

func addr(port int) string    { return "127.0.0.1:" + strconv.Itoa(port) }
func httpURL(port int) string { return "http://" + addr(port) }
