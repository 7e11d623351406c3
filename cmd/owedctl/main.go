// Command owedctl is the operator's tool: migrations, the local queue emulator
// and sandbox provider, dead-letter inspection, ledger look-ups and the
// embedded development stack.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/service"
)

// command is one owedctl subcommand. It receives the arguments after its name
// and returns an error that main prints and turns into an exit status.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// usageError marks an error caused by the command line itself (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() map[string]command {
	return map[string]command{
		"migrate":       {"apply, roll back or show database migrations", migrateCmd},
		"queue":         {"run the local queue emulator (queue serve)", queueCmd},
		"provider":      {"run the local sandbox provider (provider serve); pause or resume a provider account (provider pause|resume)", providerCmd},
		"dlq":           {"dead-letter inspection and redrive", dlqCmd},
		"dev":           {"run the whole system on this machine (make run)", devCmd},
		"tokens":        {"create, list and revoke tenant API tokens", tokensCmd},
		"apps":          {"bind an owed_apps SQL login to the tenants it may name (apps bind|unbind|list)", appsCmd},
		"notifications": {"look up notifications and their attempts", notificationsCmd},
		"stats":         {"the delivery health numbers", statsCmd},
		"drill":         {"run the stack under faults and check every invariant", drillCmd},
		"recipients":    {"list and clear undeliverable recipients (recipients list|clear)", recipientsCmd},
		"tenants":       {"pause, resume and list paused tenants (tenants pause|resume|list)", tenantsCmd},
		"version":       {"print the version, revision and Go version", versionCmd},
		"healthcheck":   {"GET /healthz on a listen address (healthcheck :8181): the image's HEALTHCHECK", healthcheckCmd},
	}
}

// versionCmd prints the build, as the services' --version do.
func versionCmd(_ context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{"version takes no arguments"}
	}
	fmt.Println("owedctl", buildinfo.Get())
	return nil
}

// healthcheckCmd is the container healthcheck of the owedctl servers (queue
// serve, provider serve): the image has no shell or curl.
func healthcheckCmd(ctx context.Context, args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usageError{"usage: owedctl healthcheck LISTEN-ADDR (e.g. :8181)"}
	}
	ctx, cancel := context.WithTimeout(ctx, buildinfo.HealthcheckTimeout)
	defer cancel()
	return buildinfo.Healthcheck(ctx, args[0])
}

func usage() string {
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	s := "usage: owedctl <command> [flags]\n\ncommands:\n"
	for _, n := range names {
		s += fmt.Sprintf("  %-14s %s\n", n, cmds[n].summary)
	}
	s += "\nRun 'owedctl <command> --help' for a command's flags and an example.\n" +
		"Exit status: 0 success, 1 the command failed, 2 bad usage.\n"
	return s
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage())
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "owedctl: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	// The first signal cancels the context so the command can shut down
	// gracefully; a second one kills us.
	ctx, stop := service.SignalContext()
	defer stop()
	err := cmd.run(ctx, args[1:])
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(os.Stderr, "owedctl %s: %s\n", args[0], err)
		return 2
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	fmt.Fprintf(os.Stderr, "owedctl %s: %s\n", args[0], err)
	return 1
}
