package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
)

// The provider account's circuit, as the worker uses it (the state is
// pace.Accounts', in Postgres, shared by every worker):
//
//   - before a row takes its turn at the pace, admit asks whether the
//     account may send: a paused account (a 429's pause, or an open
//     circuit) gives the row back with the pause as its delay and no
//     attempt; a short 429 pause is waited out; when an open circuit's
//     pause has passed, exactly one worker takes the probe and sends;
//   - an Account error trips the circuit (tripAccount): every worker stops
//     sending on the account for OWED_PROVIDER_ACCOUNT_PAUSE, the row goes
//     back to the queue without an attempt, and the metric and the log say
//     which account and why;
//   - a probe whose send shows the account works (accepted, or any answer
//     past the provider's authentication: a 429, a permanent error about
//     the message) closes the circuit (probed); on-call closes it by hand
//     with owedctl provider resume.
//
// The gate stops receiving for an account while it is paused, since the
// pause sits in the same row its Next reads.
//
// An account this process found closed, unpaused and not held is trusted
// so for pace.CacheFor (clearAccounts) before admit reads it again: one
// read a second per account instead of one per send. What this worker
// sees itself (a 429, an account error, a probe's answer) forgets that at
// once, so its next send reads the account; another process's pause
// reaches it within pace.CacheFor.

// clearAccounts remembers when this process last found each account
// closed, unpaused and not held, on the process's monotonic clock (a
// cache's age, never compared with an instant of the database's).
type clearAccounts struct {
	mu sync.Mutex
	at map[string]time.Time
}

// fresh says account was found clear less than pace.CacheFor ago. When
// that reading has just aged out, the one caller told so reads the account
// again, and the others trust the old reading until its answer (saw, or
// forget on an error) instead of all reading at once.
func (c *clearAccounts) fresh(account string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[account]
	if !ok {
		return false
	}
	if time.Since(at) < pace.CacheFor {
		return true
	}
	c.at[account] = time.Now()
	return false
}

// saw records a reading of the account: a clear one is trusted for
// pace.CacheFor, any other forgets the last clear one.
func (c *clearAccounts) saw(s pace.AccountState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	if s.Open() || s.Held() || s.Wait > 0 {
		delete(c.at, s.Account)
		return
	}
	c.at[s.Account] = time.Now()
}

// forget drops what is known of account: this worker saw it paused.
func (c *clearAccounts) forget(account string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.at, account)
}

// admit asks the account circuit whether dl may be sent now. It returns
// false when the row was released instead.
func (e *executor) admit(ctx context.Context, dl *delivery) bool {
	name := dl.sender.Name()
	if e.clear.fresh(name) {
		return true
	}
	a, err := e.accounts.Admit(ctx, name, e.accountPause)
	if err != nil {
		e.clear.forget(name)
	}
	if err != nil {
		e.completer.unknown(ctx, dl, "provider account state unavailable", err)
		return false
	}
	e.metrics.account(a.AccountState)
	e.clear.saw(a.AccountState)
	switch {
	case a.Held():
		// On-call's hold outranks everything the workers decide: no send,
		// no probe, until owedctl provider resume.
		h := a.Hold
		e.completer.release(ctx, dl, retry{after: jitter(pausedRetry), indefinite: true,
			reason: fmt.Sprintf("provider account %s held by %s since %s: %s", name, h.Actor, h.Since.Format(time.RFC3339), h.Reason)})
		e.metrics.outcome("account_held")
		return false
	case a.Probe:
		dl.probe = true
		dl.log.Info().Str("account", name).Str("reason", a.Reason).Msg("probing a paused provider account with one send")
	case a.Open():
		e.completer.release(ctx, dl, retry{after: a.Wait, reason: fmt.Sprintf("provider account %s is paused (%s): %s", name, a.Reason, a.Error)})
		e.metrics.outcome("account_paused")
		return false
	case a.Wait > e.paceMaxWait:
		// Another worker's 429 paused the account, whatever its rate.
		e.completer.release(ctx, dl, retry{after: a.Wait, reason: "rate limited by the provider"})
		e.metrics.outcome("rate_limited")
		return false
	case a.Wait > 0 && !clock.Sleep(ctx, a.Wait):
		e.completer.abandon(ctx, dl, false)
		return false
	}
	return true
}

// tripAccount records an Account error: the account's circuit opens for
// every worker.
func (e *executor) tripAccount(ctx context.Context, dl *delivery, pe *provider.Error) {
	name := dl.sender.Name()
	reason := accountReason(pe)
	e.clear.forget(name)
	e.metrics.accountErrors.WithLabelValues(name).Inc()
	if err := e.accounts.Trip(ctx, name, e.accountPause, reason, pe.Error()); err != nil {
		dl.log.Warn().Err(err).Msg("could not record the provider account's pause; it is paused at its next account error")
	}
	e.metrics.account(pace.AccountState{Account: name, Reason: reason, Wait: e.accountPause})
	dl.log.Error().Str("account", name).Str("reason", reason).Str("error", pe.Error()).
		Dur("pause", e.accountPause).
		Msg("the provider account cannot send: every send on it is paused and the row returns to the queue without an attempt")
}

// probed settles a probe by its answer: an answer that shows the account
// works closes the circuit. An account error trips it again elsewhere
// (tripAccount); an answer that says nothing (a timeout, a 5xx) leaves it
// open, and another worker probes a pause later.
func (e *executor) probed(ctx context.Context, dl *delivery, pe *provider.Error) {
	if !dl.probe || (pe != nil && pe.Class != provider.RateLimited && pe.Class != provider.Permanent) {
		return
	}
	name := dl.sender.Name()
	e.clear.forget(name)
	if _, err := e.accounts.Close(ctx, name); err != nil {
		dl.log.Warn().Err(err).Msg("could not resume the provider account after a good probe; the next probe tries again")
		return
	}
	e.metrics.account(pace.AccountState{Account: name})
	dl.log.Info().Str("account", name).Msg("provider account resumed: the probe send got through")
}

// accountReason is the short reason an account error pauses its account
// with: the provider's code, or its HTTP status.
func accountReason(pe *provider.Error) string {
	switch {
	case pe.Code != "":
		return pe.Code
	case pe.HTTPStatus != 0:
		return "http_" + strconv.Itoa(pe.HTTPStatus)
	}
	return "account"
}
