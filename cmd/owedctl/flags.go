package main

import (
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	_ "github.com/lib/pq" // the postgres driver
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

// databaseFlag registers --database-url. The environment is read by
// openDatabase after parsing and never becomes the flag's default: --help
// prints defaults, and the URL may carry a password.
func databaseFlag(fs *flag.FlagSet, purpose string) *string {
	return fs.String("database-url", "", purpose+" (default $OWED_DATABASE_URL)")
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
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		// lib/pq's parse errors do not echo the URL, so a password stays out.
		return nil, fmt.Errorf("open database: %w", err)
	}
	return db, nil
}
