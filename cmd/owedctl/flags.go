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

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/service"
)

// errHelp is returned when a command printed its help on request.
var errHelp = errors.New("help requested")

// newFlags returns a FlagSet whose --help output shows the synopsis and an
// example before the flags.
func newFlags(name, synopsis, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
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

// needAction stops a command whose first argument must be an action when
// args name none (usage, then a usage error saying missing) or ask for help
// (usage, then errHelp). It returns nil when args start with an action.
func needAction(args []string, usage func(), missing string) error {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" {
		return nil
	}
	usage()
	if len(args) == 0 {
		return usageError{missing}
	}
	return errHelp
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

// operatorDatabaseFlag registers --database-url for on-call's commands
// (tenants, provider pause|resume): holding an account and pausing a tenant
// are owed_operator's alone, never the services' role's.
func operatorDatabaseFlag(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", "database, as on-call's login, a member of owed_operator (owed_oncall in the local stacks) "+
		"(default $OWED_OPERATOR_DATABASE_URL, else $OWED_DATABASE_URL)")
}

// openOperatorWith is openWith for on-call's commands: --database-url, else
// OWED_OPERATOR_DATABASE_URL, else OWED_DATABASE_URL.
func openOperatorWith[T any](dbURL string, build func(*sql.DB) T) (v T, done func(), err error) {
	if dbURL == "" {
		dbURL = os.Getenv("OWED_OPERATOR_DATABASE_URL")
	}
	return openWith(dbURL, build)
}

// operatorHint adds to a refusal of the database what to connect as: the
// services' role may not hold, pause or write the audit trail.
func operatorHint(err error) error {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "42501" {
		return fmt.Errorf("%w: connect as a member of owed_operator (--database-url or OWED_OPERATOR_DATABASE_URL; docs/security.md)", err)
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
