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

	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/service"
)

// command is one owedctl subcommand. It receives the arguments after its name
// and returns an error that main prints and turns into an exit status.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
	// actions are the command's own subcommands (`tokens create`), each
	// with its own --help, when it has them: run takes one as its first
	// argument and names them all when it gets none, --help, or another.
	// The help test runs `--help` on every one listed here.
	actions []string
}

// usageError marks an error caused by the command line itself (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() map[string]command {
	return map[string]command{
		"migrate":       {"apply, roll back or show database migrations", migrateCmd, migrateActions},
		"queue":         {"run the local queue emulator (queue serve) or JetStream server; a queue's depths; provision the configured queue (queue provision)", queueCmd, queueActions},
		"provider":      {"run the local sandbox provider (provider serve); pause or resume a provider account (provider pause|resume)", providerCmd, providerActions},
		"dlq":           {"dead-letter inspection and redrive", dlqCmd, dlqActions},
		"dev":           {"run the whole system on this machine (make run)", devCmd, nil},
		"tokens":        {"create, list and revoke tenant API tokens", tokensCmd, tokensActions},
		"apps":          {"bind an owed_apps SQL login to the tenants it may name (apps bind|unbind|list)", appsCmd, appsActions},
		"notifications": {"look up notifications and their attempts; update an unsettled one", notificationsCmd, notificationsActions},
		"stats":         {"the delivery health numbers", statsCmd, nil},
		"drill":         {"run the stack under faults and check every invariant", drillCmd, nil},
		"recipients":    {"list and clear undeliverable recipients (recipients list|clear)", recipientsCmd, recipientsActions},
		"tenants":       {"pause, resume and list paused tenants (tenants pause|resume|list)", tenantsCmd, tenantsActions},
		"quiet-hours":   {"set, read and clear a tenant's send windows per tenant, kind or recipient (quiet-hours set|get|clear)", quietCmd, quietActions},
		"archive":       {"write a settled id range of the ledger to files with a manifest, and restore them (archive write|restore)", archiveCmd, archiveActions},
		"partitions":    {"create the ledger's month partitions ahead and list them (partitions ensure|list)", partitionsCmd, partitionsActions},
		"retention":     {"archive and drop the ledger's months past their retention (retention run)", retentionCmd, retentionActions},
		"hold":          {"place, lift and list compliance holds that keep a tenant's months from retention (hold add|remove|list)", holdCmd, holdActions},
		"digests":       {"list and set a tenant's digestible kinds (digests list|set)", digestsCmd, digestsActions},
		"erase":         {"forget a recipient's address and payloads, keeping the delivery facts (erase --tenant T --recipient R)", eraseCmd, nil},
		"version":       {"print the version, revision and Go version (also: owedctl --version)", versionCmd, nil},
		"healthcheck":   {"GET /healthz on a listen address (healthcheck :8181): the image's HEALTHCHECK", healthcheckCmd, nil},
	}
}

// versionCmd prints the build, as the services' --version do.
func versionCmd(_ context.Context, args []string) error {
	fs := newFlags("version", "version   (or: owedctl --version)", "")
	if err := parseOnlyFlags(fs, args, ": version takes no arguments"); err != nil {
		return err
	}
	fmt.Println("owedctl", buildinfo.Get())
	return nil
}

// healthcheckCmd is the container healthcheck of the owedctl servers (queue
// serve, provider serve): the image has no shell or curl.
func healthcheckCmd(ctx context.Context, args []string) error {
	fs := newFlags("healthcheck", "healthcheck LISTEN-ADDR   (exit 0 when GET /healthz there answers 200, else 1)",
		"owedctl healthcheck :8181")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usageError{"give one listen address, e.g. :8181"}
	}
	ctx, cancel := context.WithTimeout(ctx, buildinfo.HealthcheckTimeout)
	defer cancel()
	return buildinfo.Healthcheck(ctx, fs.Arg(0))
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
	s += "\nRun 'owedctl <command> --help' for a command's flags and an example, and\n" +
		"'owedctl <command> <action> --help' for an action's. 'owedctl --version' prints the build.\n" +
		"Exit status: 0 success, 1 the command failed, 2 bad usage.\n"
	return s
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage())
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		// As the services answer it: the build, whatever follows.
		args = []string{"version"}
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
