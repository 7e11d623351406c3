package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/queue/backends"
)

// devCmd runs the whole system on this machine (make run). By default it
// resumes the ledger an earlier run left in --dir; --fresh starts over.
func devCmd(ctx context.Context, args []string) error {
	fs := newFlags("dev", "dev [flags]   (make run ARGS='--tick 5s')",
		"owedctl dev --tick 5s --duration 2m   # a fast demo that stops itself")
	cfg := devstack.Config{}
	fs.StringVar(&cfg.Dir, "dir", devstack.DefaultDir, "folder for the PostgreSQL cluster, the logs and the env file")
	fs.BoolVar(&cfg.Fresh, "fresh", false, "wipe --dir and start with an empty ledger (default: resume the last run's ledger)")
	fs.DurationVar(&cfg.Tick, "tick", devstack.DefaultTick,
		fmt.Sprintf("sweep interval of the built-in scheduler; materialise runs every %d ticks", devstack.MaterialiseEveryTicks))
	fs.StringVar(&cfg.Rate, "rate", devstack.DefaultRate, "sandbox rate limit and the workers' shared pace, <count>/<s|m|h>")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (for CI); 0 runs until Ctrl-C")
	fs.BoolVar(&cfg.NoSeed, "no-seed", false, "start without the demo workload")
	fs.StringVar(&cfg.Queue, "queue", backends.Default, "queue backend: rest (the emulator), jetstream (a JetStream server in --dir) or sqs (owed-sqs-server, from scripts/install-sqs.sh)")
	fs.IntVar(&cfg.SweeperPort, "sweeper-port", devstack.DefaultSweeperPort, "sweeper port (scheduling API, /cron)")
	fs.IntVar(&cfg.SweeperMetricsPort, "sweeper-metrics-port", devstack.DefaultSweeperMetricsPort, "sweeper operator port (/metrics, /readyz)")
	fs.IntVar(&cfg.QueuePort, "queue-port", devstack.DefaultQueuePort, "queue server port (the emulator's, JetStream's or the local SQS server's)")
	fs.IntVar(&cfg.SandboxPort, "sandbox-port", devstack.DefaultSandboxPort, "sandbox provider port")
	workerPorts := fs.String("worker-ports", joinPorts(devstack.DefaultWorkerPorts()), "comma-separated worker ports (/healthz, /readyz, /metrics), one worker process each")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	for _, p := range strings.Split(*workerPorts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return usageError{fmt.Sprintf("--worker-ports %q: want comma-separated port numbers like 9091,9092", *workerPorts)}
		}
		cfg.WorkerPorts = append(cfg.WorkerPorts, n)
	}
	// The URL is read here, never shown as a flag default: it may carry a
	// password.
	cfg.DatabaseURL = os.Getenv("OWED_DATABASE_URL")
	cfg.Out = os.Stdout
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		cfg.Terminal = true
	}
	s, err := devstack.New(cfg)
	if err != nil {
		// Every setting New rejects came from a flag it names.
		return usageError{err.Error()}
	}
	return s.Run(ctx)
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
