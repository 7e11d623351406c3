package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/owedhq/owed/internal/pace"
)

// providerResume is `owedctl provider resume --account NAME`: it lifts
// on-call's hold of the account (provider pause) and closes the circuit
// that an account error opened (an expired credential, no credit), so every
// worker sends on the account again at once instead of waiting for the
// next probe. It connects as on-call's login, a member of owed_operator
// (the services' role may not lift a hold), and resumes through
// owed_provider_account_unhold (internal/pace/sql/account.sql), which
// writes the audit line with --operator and --reason; the rows the pause held
// back are still queued and come back within OWED_PROVIDER_ACCOUNT_PAUSE
// (a minute after a hold).
func providerResume(ctx context.Context, args []string) error {
	return runProviderResume(ctx, os.Stdout, args)
}

// runProviderResume is providerResume writing to out.
func runProviderResume(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("provider resume", "provider resume --account NAME [--reason TEXT] [--operator NAME] [--database-url URL]",
		"owedctl provider resume --account twilio")
	account := fs.String("account", "", "the provider account to resume: the provider's name as the alert and the worker's log name it (e.g. twilio, sendgrid, webhook)")
	audit := addAuditFlags(fs, "why, for the audit trail (optional)")
	dbURL := operatorLogin.flag(fs, "database")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	who, err := audit.operatorName()
	if err != nil {
		return err
	}
	accounts, done, err := openAccounts(*account, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
		return err
	}
	st, err := accounts.State(ctx, *account)
	if err != nil {
		return err
	}
	was, err := accounts.Resume(ctx, *account, who, *audit.reason)
	if err != nil {
		return operatorLogin.hint(err)
	}
	if !was {
		fmt.Fprintf(out, "provider account %s was not paused; nothing changed\n", *account)
		return nil
	}
	if h := st.Hold; h != nil {
		fmt.Fprintf(out, "provider account %s: the hold by %s since %s is lifted (%s)\n", *account, h.Actor,
			h.Since.Format(time.RFC3339), h.Reason)
	}
	if st.Open() {
		fmt.Fprintf(out, "provider account %s resumed (paused since %s: %s %s); workers send on it again, and the rows it held back return within OWED_PROVIDER_ACCOUNT_PAUSE\n",
			*account, st.Since.UTC().Format(time.RFC3339), st.Reason, st.Error)
	} else {
		fmt.Fprintf(out, "provider account %s resumed; workers send on it again, and the rows it held back return within a minute\n", *account)
	}
	return nil
}

// providerPause is `owedctl provider pause --account NAME --reason TEXT`:
// on-call's hold of a provider account. No worker sends on it, nor probes
// it, until `owedctl provider resume --account NAME`; the rows routed to it
// go back to the queue without an attempt and come back every minute to
// look again. The operator is the OS user unless --operator names
// another; the database records the login beside it, and the hold's
// function writes the audit line.
func providerPause(ctx context.Context, args []string) error {
	return runProviderPause(ctx, os.Stdout, args)
}

// runProviderPause is providerPause writing to out.
func runProviderPause(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("provider pause", "provider pause --account NAME --reason TEXT [--operator NAME] [--database-url URL]",
		`owedctl provider pause --account twilio --reason "carrier incident, ticket 4711"`)
	account := fs.String("account", "", "the provider account to hold: the provider's name as the worker's metrics and log name it (e.g. twilio, sendgrid, webhook)")
	audit := addAuditFlags(fs, "why, for the audit trail and the other operators (required; shown by the rows' last error and resume)")
	dbURL := operatorLogin.flag(fs, "database")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	if *audit.reason == "" {
		return usageError{"--reason: say why the account is held"}
	}
	who, err := audit.operatorName()
	if err != nil {
		return err
	}
	accounts, done, err := openAccounts(*account, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
		return err
	}
	if err := accounts.Hold(ctx, *account, *audit.reason, who); err != nil {
		return operatorLogin.hint(err)
	}
	fmt.Fprintf(out, "provider account %s held by %s: no worker sends on it until `owedctl provider resume --account %s`\n",
		*account, who, *account)
	return nil
}

// openAccounts checks --account and opens the accounts' circuits and holds.
func openAccounts(account, dbURL string) (*pace.Accounts, func(), error) {
	if account == "" || len(account) > pace.MaxAccountLength {
		return nil, nil, usageError{fmt.Sprintf("--account: name the provider account (1 to %d bytes), as the OwedProviderAccountPaused alert does", pace.MaxAccountLength)}
	}
	return openWith(operatorLogin.url(dbURL), func(db *sql.DB) *pace.Accounts { return pace.NewAccounts(db, nil) })
}
