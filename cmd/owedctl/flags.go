package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/service"
)

// errHelp is returned when a command printed its help on request.
var errHelp = errors.New("help requested")

// onNewFlags, when set (by the help test), is told of every FlagSet
// newFlags makes, so the test learns which flags a command defines from the
// command itself rather than from a list that could fall behind it.
var onNewFlags func(*flag.FlagSet)

// isHelp reports whether arg asks for help, as the flag package reads it.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

// newFlags returns a FlagSet whose --help output shows the synopsis and an
// example before the flags.
func newFlags(name, synopsis, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if onNewFlags != nil {
		onNewFlags(fs)
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: owedctl %s\n\n", synopsis)
		if example != "" {
			fmt.Fprintf(os.Stderr, "example:\n  %s\n\n", example)
		}
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, turning -h into errHelp and other mistakes into a
// usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			// The flag package has already printed the usage.
			return errHelp
		}
		return usageError{err.Error()}
	}
	return nil
}

// needAction stops a command whose first argument must be one of actions
// (its entry's in commands()) when args name none (usage, then a usage error
// naming the actions), ask for help (usage, then errHelp) or name another
// (a usage error naming the actions). It returns nil when args start with
// an action.
func needAction(args []string, usage func(), actions []string) error {
	oneOf := "one of " + strings.Join(actions, ", ")
	switch {
	case len(args) == 0:
		usage()
		return usageError{"missing action: " + oneOf}
	case isHelp(args[0]) || args[0] == "help":
		usage()
		return errHelp
	case !slices.Contains(actions, args[0]):
		return usageError{fmt.Sprintf("unknown action %q: %s", args[0], oneOf)}
	}
	return nil
}

// printUsage returns a usage func printing text to stderr.
func printUsage(text string) func() {
	return func() { fmt.Fprint(os.Stderr, text) }
}

// parseOnlyFlags parses args that must be flags alone; hint follows the
// complaint about a stray argument.
func parseOnlyFlags(fs *flag.FlagSet, args []string, hint string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0)) + hint}
	}
	return nil
}

// printJSON writes v to out as indented JSON, the --json output of every
// command.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// databaseFlag registers --database-url. The environment is read by
// openDatabase after parsing and never becomes the flag's default: --help
// prints defaults, and the URL may carry a password.
func databaseFlag(fs *flag.FlagSet, purpose string) *string {
	return fs.String("database-url", "", purpose+" (default $OWED_DATABASE_URL)")
}

// login is a database login a command connects as instead of the
// application role: the variable holding its URL, read after
// --database-url and before OWED_DATABASE_URL, so one shell holds every URL
// (the dev stack's env file does), and the group it must be a member of,
// with the local stacks' member.
type login struct{ variable, group, local string }

var (
	// operatorLogin is on-call's (tenants, provider pause|resume): holding
	// an account and pausing a tenant are owed_operator's alone, never the
	// services' role's.
	operatorLogin = login{"OWED_OPERATOR_DATABASE_URL", "owed_operator", "owed_oncall"}
	// tokenAdminLogin hands out a tenant's credentials (tokens, apps): the
	// services' role may only look a token up.
	tokenAdminLogin = login{"OWED_TOKEN_ADMIN_DATABASE_URL", "owed_token_admin", "owed_admin"}
	// readLogin is where the commands that only read (stats,
	// notifications find and show) go: a streaming replica, when one is
	// named, so an operator's look-ups never load the primary; their
	// answer is as old as the replica's lag (docs/scale.md).
	readLogin = login{"OWED_READ_DATABASE_URL", "owed_runtime", "owed_app"}
)

// flag registers --database-url for a command that connects as l.
func (l login) flag(fs *flag.FlagSet, purpose string) *string {
	return fs.String("database-url", "", fmt.Sprintf("%s, as a member of %s (%s in the local stacks) (default $%s, else $OWED_DATABASE_URL)",
		purpose, l.group, l.local, l.variable))
}

// url is the URL a command connecting as l opens: flagged (--database-url),
// else l's variable; empty, openDatabase reads OWED_DATABASE_URL.
func (l login) url(flagged string) string {
	if flagged != "" {
		return flagged
	}
	return os.Getenv(l.variable)
}

// hint adds to the database's refusal what to connect as: most often the
// application role's URL in OWED_DATABASE_URL was used.
func (l login) hint(err error) error {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "42501" { // insufficient_privilege
		return fmt.Errorf("%w: connect as a member of %s (%s in the local stacks) with --database-url or %s; docs/security.md",
			err, l.group, l.local, l.variable)
	}
	return err
}

// openDatabase opens the database named by --database-url or, failing
// that, OWED_DATABASE_URL.
func openDatabase(dbURL string) (*sql.DB, error) {
	if dbURL == "" {
		dbURL = os.Getenv("OWED_DATABASE_URL")
	}
	if dbURL == "" {
		return nil, usageError{"no database: set OWED_DATABASE_URL or pass --database-url"}
	}
	conn, err := pq.NewConnector(dbURL)
	if err != nil {
		// lib/pq's parse error quotes the whole URL, password and all.
		return nil, usageError{fmt.Sprintf("--database-url / OWED_DATABASE_URL is not a valid postgres URL (percent-encode special characters in the password): %v",
			config.RedactError(err, dbURL))}
	}
	return sql.OpenDB(conn), nil
}

// checkWrites refuses, before a command writes to the database named by
// dbURL (see openDatabase), commits a crash or a failover can lose, as the
// services refuse them at start-up (service.CheckDurable): an operator's
// pause, resume, redrive or token change that the server acknowledged and
// then lost would be gone with nobody told. OWED_ALLOW_ASYNC_COMMIT=true
// lets the command write, logging the problem on stderr. Reads are not
// checked.
func checkWrites(ctx context.Context, dbURL string) error {
	ops, err := service.LoadOperations("")
	if err != nil {
		return err
	}
	db, err := openDatabase(dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = service.CheckDurable(ctx, db, zerolog.New(os.Stderr), ops.AllowAsyncCommit)
	return err
}

// openWith opens the database named by dbURL (see openDatabase) and builds
// what the command works on over it; done closes the pool.
func openWith[T any](dbURL string, build func(*sql.DB) T) (v T, done func(), err error) {
	db, err := openDatabase(dbURL)
	if err != nil {
		return v, nil, err
	}
	return build(db), func() { db.Close() }, nil
}
