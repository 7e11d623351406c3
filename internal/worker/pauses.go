package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/pace"
)

// Operator pauses (pace.Tenants, pace.Accounts.Hold; internal/pace/sql/account.sql
// and tenant_pauses.sql): on-call
// pauses every send of a tenant, or holds every send of a provider account,
// until lifted by hand. A claimed row of a paused tenant, or routed to a
// held account, is handed back to the ledger until pausedRetry from now
// (the pause has no end the worker knows, so it never waits in the queue)
// and its message acked, with no attempt counted, and is counted as
// owed_worker_messages_total{outcome="tenant_paused"} or
// {outcome="account_held"}. The account's hold is read with its circuit
// (admit, which trusts a clear reading for pace.CacheFor); the tenants'
// pauses are read all at once, at most once every pace.CacheFor, so
// neither costs a statement per send.

// pausedRetry is how long (±20%) a row held back by an operator pause
// waits in the ledger before the sweep publishes it again: the pause has no
// end, so it is looked at again this often, and a resume takes effect
// within it (and the next sweep).
const pausedRetry = time.Minute

// pauses is the worker's reading of the operator pauses, refreshed when it
// is older than pace.CacheFor: a pause or a resume takes effect within it. The reading's age is measured on the process's
// monotonic clock, not Options.Clock: it is the cache's own, never compared
// with an instant of the ledger's.
type pauses struct {
	read    func(ctx context.Context) (pace.Pauses, error)
	metrics *Metrics

	mu       sync.Mutex
	readAt   time.Time
	tenants  map[string]pace.TenantPause
	accounts map[string]bool
}

func newPauses(read func(ctx context.Context) (pace.Pauses, error), m *Metrics) *pauses {
	return &pauses{read: read, metrics: m}
}

// tenant reports the tenant's pause, if it is paused: from the last reading
// when it is fresh, otherwise after reading again. Concurrent callers share
// one reading.
func (p *pauses) tenant(ctx context.Context, id string) (pace.TenantPause, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fresh(ctx); err != nil {
		return pace.TenantPause{}, false, err
	}
	t, ok := p.tenants[id]
	return t, ok, nil
}

// held says on-call holds the account, by the same reading. An unreadable
// reading says not held: the gate keeps receiving, and admit, which reads
// the account's hold with its circuit, holds each row back all the same.
func (p *pauses) held(ctx context.Context, account string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fresh(ctx) == nil && p.accounts[account]
}

// fresh reads the pauses again unless the last reading is younger than
// pace.CacheFor; p.mu is held.
func (p *pauses) fresh(ctx context.Context) error {
	if p.tenants != nil && time.Since(p.readAt) < pace.CacheFor {
		return nil
	}
	ps, err := p.read(ctx)
	if err != nil {
		return err
	}
	p.readAt = time.Now()
	p.tenants = make(map[string]pace.TenantPause, len(ps.Tenants))
	for _, t := range ps.Tenants {
		p.tenants[t.Tenant] = t
	}
	p.accounts = make(map[string]bool, len(ps.Accounts))
	for _, a := range ps.Accounts {
		p.accounts[a.Account] = true
	}
	p.metrics.operatorPauses.WithLabelValues("tenant").Set(float64(len(ps.Tenants)))
	p.metrics.operatorPauses.WithLabelValues("account").Set(float64(len(ps.Accounts)))
	return nil
}

// tenantPaused gives back a row whose tenant on-call paused. It returns
// true when the row was released instead of sent.
func (e *executor) tenantPaused(ctx context.Context, dl *delivery) bool {
	t, paused, err := e.pauses.tenant(ctx, dl.row.Tenant)
	switch {
	case err != nil:
		e.completer.unknown(ctx, dl, "operator pauses unavailable", err)
		return true
	case !paused:
		return false
	}
	e.completer.release(ctx, dl, retry{after: jitter(pausedRetry), indefinite: true,
		reason: fmt.Sprintf("tenant paused by %s since %s: %s", t.Actor, t.Since.Format(time.RFC3339), t.Reason)})
	e.metrics.outcome("tenant_paused")
	return true
}
