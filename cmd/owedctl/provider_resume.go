package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"

	"github.com/owedhq/owed/internal/pace"
)

// providerResume is `owedctl provider resume --account NAME`: it closes the
// provider account's circuit that an account error opened (an expired
// credential, no credit), so every worker sends on the account again at
// once instead of waiting for the next probe. It connects as the runtime
// role, like the workers, and resumes through owed_provider_account_resume
// (migrations/00022); the rows the pause held back are still queued and
// come back within OWED_PROVIDER_ACCOUNT_PAUSE.
func providerResume(ctx context.Context, args []string) error {
	return runProviderResume(ctx, os.Stdout, args)
}

// runProviderResume is providerResume writing to out.
func runProviderResume(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("provider resume", "provider resume --account NAME [--database-url URL]",
		"owedctl provider resume --account twilio")
	account := fs.String("account", "", "the provider account to resume: the provider's name as the alert and the worker's log name it (e.g. twilio, sendgrid, webhook)")
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *account == "" || len(*account) > pace.MaxAccountLength {
		return usageError{fmt.Sprintf("--account: name the provider account (1 to %d bytes), as the OwedProviderAccountPaused alert does", pace.MaxAccountLength)}
	}
	accounts, done, err := openWith(*dbURL, func(db *sql.DB) *pace.Accounts { return pace.NewAccounts(db, nil) })
	if err != nil {
		return err
	}
	defer done()
	st, err := accounts.State(ctx, *account)
	if err != nil {
		return err
	}
	was, err := accounts.Resume(ctx, *account)
	if err != nil {
		return err
	}
	if !was {
		fmt.Fprintf(out, "provider account %s was not paused; nothing changed\n", *account)
		return nil
	}
	fmt.Fprintf(out, "provider account %s resumed (paused since %s: %s %s); workers send on it again, and the rows it held back return within OWED_PROVIDER_ACCOUNT_PAUSE\n",
		*account, st.Since.UTC().Format("2006-01-02T15:04:05Z"), st.Reason, st.Error)
	return nil
}
