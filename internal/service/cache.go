package service

import (
	"context"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
)

// Defaults of Cache.
const (
	// CacheTTLDefault is how long a scrape-time reading is served again:
	// Prometheus scrapes every 15 to 60 seconds, so a reading a few seconds
	// old is as good as a fresh one, and a client scraping in a loop costs
	// the database one query per TTL, not one per request.
	CacheTTLDefault = 5 * time.Second
	// CacheFetchTimeoutDefault bounds one fetch.
	CacheFetchTimeoutDefault = 5 * time.Second
)

// Cache keeps the answer of Fetch, value and error alike, for TTL. Callers
// that come while a fetch is under way wait for it instead of starting
// their own, so however many requests arrive, at most one fetch runs per
// TTL. The fetch runs on its own context with FetchTimeout, never on a
// caller's: a scrape that gives up must not leave its cancellation in the
// cache.
type Cache[T any] struct {
	Fetch func(context.Context) (T, error)
	// TTL defaults to CacheTTLDefault, FetchTimeout to
	// CacheFetchTimeoutDefault, Clock to clock.Real().
	TTL, FetchTimeout time.Duration
	Clock             clock.Clock

	once sync.Once
	// turn is held by the one caller checking or refreshing the answer.
	turn chan struct{}
	have bool
	at   time.Time
	val  T
	err  error
}

// Get returns the cached answer, fetching it again when it is older than
// TTL. ctx bounds only the wait for another caller's fetch.
func (c *Cache[T]) Get(ctx context.Context) (T, error) {
	c.once.Do(func() { c.turn = make(chan struct{}, 1) })
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	defer func() { <-c.turn }()
	clk := c.Clock
	if clk == nil {
		clk = clock.Real()
	}
	now := clk.Now()
	if c.have && now.Sub(c.at) < orDefault(c.TTL, CacheTTLDefault) {
		return c.val, c.err
	}
	fctx, cancel := context.WithTimeout(context.Background(), orDefault(c.FetchTimeout, CacheFetchTimeoutDefault))
	defer cancel()
	c.val, c.err = c.Fetch(fctx)
	c.have, c.at = true, now
	return c.val, c.err
}
