package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/owedhq/owed/internal/drill"
	"github.com/owedhq/owed/internal/queue/backends"
)

// errInvariants makes owedctl exit 1 when a drill ran but an invariant broke;
// the table above it says which.
var errInvariants = errors.New("invariants broken (see the table above)")

// drillCmd runs the whole stack under faults against a throwaway database
// and checks every invariant; docs/reliability.md has the figures.
func drillCmd(ctx context.Context, args []string) error {
	fs := newFlags("drill", "drill [flags]",
		"owedctl drill --rows 5000 --faults worker-kill,sweeper-kill,provider-5xx --duration-limit 10m   # or --faults all, --queue jetstream")
	cfg := drill.Config{}
	fs.StringVar(&cfg.Dir, "dir", drill.DefaultDir, "folder for the throwaway cluster and the logs; wiped first (must be an earlier drill's or dev's folder, or absent)")
	fs.StringVar(&cfg.Queue, "queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", ")+" (queue-restart kills -9 its server)")
	fs.IntVar(&cfg.Rows, "rows", drill.DefaultRows, "rows in the workload")
	faults := fs.String("faults", "all", "comma-separated faults, all (every one the --queue backend can have) or none: worker-kill, sweeper-kill, queue-restart, pg-restart, pg-crash, pg-failover, provider-5xx, provider-timeouts, provider-429-storm, provider-permanent, queue-redelivery and queue-publish-503 (--queue rest only), scheduler-pause, scale")
	fs.DurationVar(&cfg.Tick, "tick", drill.DefaultTick, "sweep interval of the built-in scheduler")
	fs.StringVar(&cfg.Rate, "rate", drill.DefaultRate, "sandbox rate limit and the workers' shared pace, <count>/<s|m|h>")
	fs.DurationVar(&cfg.Spread, "spread", 0, "the rows fall due over this window, while faults are injected (default: 1s per 100 rows, at least 30s)")
	fs.DurationVar(&cfg.DurationLimit, "duration-limit", drill.DefaultDurationLimit, "give up draining after this long from the start; rows still owed then break an invariant")
	fs.DurationVar(&cfg.StallLimit, "stall-limit", 0, "give up draining early when no row has settled for this long (default 0: only --duration-limit)")
	fs.DurationVar(&cfg.Pause, "pause", drill.DefaultPause, "how long the scheduler stays paused (scheduler-pause)")
	fs.DurationVar(&cfg.Storm, "storm", drill.DefaultStorm, "how long the provider's 429 storm lasts (provider-429-storm)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "repeat a drill's fault timing and workload (default: from the clock; the table shows it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	var err error
	if cfg.Faults, err = drill.ParseFaults(*faults, cfg.Queue); err != nil {
		return usageError{"--faults: " + err.Error()}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	cfg.Out = os.Stderr
	res, err := drill.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Table(os.Stdout)
	if len(res.Violations) > 0 {
		return errInvariants
	}
	return nil
}
