package pace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/clock"
)

// AccountPauseDefault is how long an account error pauses a provider account
// before one worker probes it with one real send
// (OWED_PROVIDER_ACCOUNT_PAUSE).
const AccountPauseDefault = 5 * time.Minute

// MaxAccountReason bounds the short reason an account pause records (the
// provider's code; a metric label).
const MaxAccountReason = 128

// MaxAccountError bounds the provider's message an account pause records.
const MaxAccountError = 1024

// Accounts is the account circuit every worker process shares through the
// pace rows (owed_provider_account_*, sql/account.sql): an account error
// (provider.Account) trips
// it, which pauses every send on the account; when the pause has passed,
// one worker takes the probe and sends one real message; a success resumes
// the account, another account error trips it again. A 429's pause lives in
// the same row (Limiter.Pause), so Admit holds a send back for either.
//
// Every write is a SECURITY DEFINER function; the reads are plain SELECTs
// the runtime role may run. Like the Limiter, Accounts passes its clock's
// NowOrNil as every statement's now, so the database's clock decides in
// production.
type Accounts struct{ store }

// NewAccounts returns the account circuit over db (the runtime role), on
// clk (clock.Real() when nil).
func NewAccounts(db *sql.DB, clk clock.Clock) *Accounts { return &Accounts{newStore(db, clk)} }

// store is what Accounts and Tenants write with: the runtime role's pool,
// and the clock whose NowOrNil every statement passes as its now.
type store struct {
	db    *sql.DB
	clock clock.Clock
}

// newStore returns the store over db on clk (clock.Real() when nil).
func newStore(db *sql.DB, clk clock.Clock) store {
	if clk == nil {
		clk = clock.Real()
	}
	return store{db: db, clock: clk}
}

// AccountState is an account's pause as one statement read it.
type AccountState struct {
	Account string
	// Wait is how long the account's pause still runs (a 429's or an
	// account error's); zero when it is not paused.
	Wait time.Duration
	// Reason is the account error's short reason (the provider's code), and
	// Error what the provider said; both empty unless the circuit is open.
	Reason, Error string
	// Since is when the circuit opened; zero unless it is open.
	Since time.Time
	// Hold is on-call's hold of the account (Hold), nil unless it is held:
	// no worker sends on a held account, and none probes it.
	Hold *AccountHold
}

// Open says the account's circuit is open: an account error paused it and
// no send has succeeded since.
func (s AccountState) Open() bool { return s.Reason != "" }

// Held says on-call holds the account (Hold): nothing is sent on it until
// Resume.
func (s AccountState) Held() bool { return s.Hold != nil }

// Admission is Admit's answer.
type Admission struct {
	AccountState
	// Probe says the caller took the probe: its send decides whether the
	// circuit closes (Resume) or opens again (Trip).
	Probe bool
}

// Admit says whether a send on account may go now. A paused account
// answers the wait (the send should come back after it, or wait it out
// when it is short); an open circuit whose pause has passed hands the probe
// to exactly one caller, and every other caller a wait of pause (at most
// MaxPause). A held
// account is never probed: the caller sees Held and holds the send back.
// One read per send; the probe is one more statement, once per pause.
func (a *Accounts) Admit(ctx context.Context, account string, pause time.Duration) (Admission, error) {
	pause = min(pause, MaxPause)
	s, err := a.State(ctx, account)
	if err != nil || s.Held() || !s.Open() || s.Wait > 0 {
		return Admission{AccountState: s}, err
	}
	var took bool
	if err := a.db.QueryRowContext(ctx, qAccountProbe, account, ceilMicros(pause), a.clock.NowOrNil()).
		Scan(&took); err != nil {
		return Admission{}, fmt.Errorf("pace: probe account %q: %w", account, err)
	}
	if !took {
		// Another worker took the probe (or the circuit closed meanwhile:
		// coming back after a pause is harmless either way).
		s.Wait = pause
	}
	return Admission{AccountState: s, Probe: took}, nil
}

// State reads account's pause.
func (a *Accounts) State(ctx context.Context, account string) (AccountState, error) {
	s := AccountState{Account: account}
	var (
		now    time.Time
		paused sql.NullTime
		reason sql.NullString
		msg    sql.NullString
		since  sql.NullTime
		hold   AccountHold
		held   sql.NullTime
	)
	err := a.db.QueryRowContext(ctx, qAccountState, account, a.clock.NowOrNil()).
		Scan(&now, &paused, &reason, &msg, &since, &hold.Reason, &hold.Actor, &held)
	if err != nil {
		return s, fmt.Errorf("pace: read account %q: %w", account, err)
	}
	if paused.Valid {
		s.Wait = max(paused.Time.Sub(now), 0)
	}
	s.Reason, s.Error, s.Since = reason.String, msg.String, since.Time
	if held.Valid {
		hold.Account, hold.Since = account, held.Time.UTC()
		s.Hold = &hold
	}
	return s, nil
}

// Trip opens account's circuit for pause (at most MaxPause): no worker
// sends on it until then, and then one probes. reason is the provider's code (a metric
// label, at most MaxAccountReason bytes) and msg what it said; both are
// cut to their bounds.
func (a *Accounts) Trip(ctx context.Context, account string, pause time.Duration, reason, msg string) error {
	if reason == "" {
		reason = "account"
	}
	pause = min(pause, MaxPause)
	_, err := a.db.ExecContext(ctx, qAccountTrip, account, ceilMicros(pause), cut(reason, MaxAccountReason),
		cut(msg, MaxAccountError), a.clock.NowOrNil())
	if err != nil {
		return fmt.Errorf("pace: pause account %q: %w", account, err)
	}
	return nil
}

// Resume is on-call's: it lifts the account's hold (Hold), closes its
// circuit and lifts its pause, in one statement that writes the audit
// line naming operator and reason (which may be empty); it reports whether
// the account was held or its circuit open.
func (a *Accounts) Resume(ctx context.Context, account, operator, reason string) (bool, error) {
	if err := errors.Join(checkAccount(account), checkOperator(operator, reason)); err != nil {
		return false, err
	}
	var was bool
	if err := a.db.QueryRowContext(ctx, qAccountUnhold, account, operator, reason, a.clock.NowOrNil()).Scan(&was); err != nil {
		return false, fmt.Errorf("pace: resume account %q: %w", account, err)
	}
	return was, nil
}

// Close is a good probe's: it closes account's circuit and lifts its pause,
// and reports whether the circuit was open. It leaves on-call's hold alone:
// only Resume lifts that.
func (a *Accounts) Close(ctx context.Context, account string) (bool, error) {
	var was bool
	if err := a.db.QueryRowContext(ctx, qAccountResume, account, a.clock.NowOrNil()).Scan(&was); err != nil {
		return false, fmt.Errorf("pace: resume account %q: %w", account, err)
	}
	return was, nil
}

// cut truncates s to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
