package console

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Wrong operator tokens are throttled per source address and, at the login
// form, per operator name: each wrong token takes one try from the source's
// bucket and the name's, and an empty bucket refuses every attempt it
// covers with 429 and Retry-After until it earns a try back. The right
// token is refused too while the bucket is empty: otherwise a guesser is
// told when it has found the token, and the lock-out protects nothing. A
// session cookie is not a guess and is never throttled; a bearer request is
// throttled per source (its operator is always "bearer", so a per-name lock
// would lock every script out at once).
//
// A source is the peer's address as the listener sees it (an IPv6 address
// by its /64, which one host usually holds whole); a forwarded header is not
// trusted. Behind a reverse proxy every operator shares the proxy's address,
// so one guesser locks them all out: use the proxy's own authentication
// there (OWED_CONSOLE_TRUSTED_HEADER).

const (
	// LoginFailureBurst is how many wrong tokens a source or an operator
	// name may offer before it is locked out.
	LoginFailureBurst = 10
	// LoginFailureRefill is how long a locked-out source or name waits for
	// each further try.
	LoginFailureRefill = 30 * time.Second
	// throttleEntries bounds each map of buckets (sources, names): at the
	// bound the bucket that failed least recently is forgotten. A bucket
	// that has refilled holds nothing a new one would not, so only more
	// than this many sources or names failing within a refill of each
	// other lose anything.
	throttleEntries = 10000
)

// throttle is the two maps of buckets and their metrics.
type throttle struct {
	now              func() time.Time
	sources, names   *lru.Cache[string, *rate.Limiter]
	failures, locked *prometheus.CounterVec
}

func newThrottle(now func() time.Time, reg prometheus.Registerer) *throttle {
	sources, _ := lru.New[string, *rate.Limiter](throttleEntries)
	names, _ := lru.New[string, *rate.Limiter](throttleEntries)
	t := &throttle{now: now, sources: sources, names: names,
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_console_login_failures_total",
			Help: "Wrong operator tokens offered to the console, by reason: wrong_token (the login form), wrong_bearer (an Authorization header).",
		}, []string{"reason"}),
		locked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "owed_console_login_throttled_total",
			Help: "Console logins and bearer requests refused with 429 because their source address or operator name offered too many wrong tokens, by limit: source, operator.",
		}, []string{"limit"}),
	}
	for _, r := range []string{"wrong_token", "wrong_bearer"} {
		t.failures.WithLabelValues(r)
	}
	for _, l := range []string{"source", "operator"} {
		t.locked.WithLabelValues(l)
	}
	if reg != nil {
		reg.MustRegister(t.failures, t.locked)
	}
	return t
}

// lockedOut says how long the source of r, or the operator name when it is
// not empty, is still locked out (zero when neither is), and counts a
// refusal.
func (t *throttle) lockedOut(r *http.Request, name string) time.Duration {
	now := t.now()
	if d := wait(t.sources, sourceKey(r), now); d > 0 {
		t.locked.WithLabelValues("source").Inc()
		return d
	}
	if name == "" {
		return 0
	}
	if d := wait(t.names, nameKey(name), now); d > 0 {
		t.locked.WithLabelValues("operator").Inc()
		return d
	}
	return 0
}

// failed records a wrong token from r's source and, when it is not empty,
// for the operator name.
func (t *throttle) failed(r *http.Request, name, reason string) {
	now := t.now()
	t.failures.WithLabelValues(reason).Inc()
	take(t.sources, sourceKey(r), now)
	if name != "" {
		take(t.names, nameKey(name), now)
	}
}

// wait is how long key's bucket in m has no try left.
func wait(m *lru.Cache[string, *rate.Limiter], key string, now time.Time) time.Duration {
	lim, ok := m.Peek(key)
	if !ok {
		return 0
	}
	if tokens := lim.TokensAt(now); tokens < 1 {
		return time.Duration((1 - tokens) * float64(LoginFailureRefill))
	}
	return 0
}

// take spends one of key's tries, creating its bucket on the first failure.
func take(m *lru.Cache[string, *rate.Limiter], key string, now time.Time) {
	lim, ok := m.Get(key)
	if !ok {
		fresh := rate.NewLimiter(rate.Every(LoginFailureRefill), LoginFailureBurst)
		// Two first failures at once share one bucket.
		if prev, found, _ := m.PeekOrAdd(key, fresh); found {
			lim = prev
		} else {
			lim = fresh
		}
	}
	lim.AllowN(now, 1)
}

// sourceKey is r's peer address: an IPv4 address whole, an IPv6 address
// by its /64.
func sourceKey(r *http.Request) string {
	host := peer(r)
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.WithZone("").Prefix(64)
		return p.String()
	}
	return addr.String()
}

// nameKey folds case, so "Alice" and "alice" share a bucket.
func nameKey(name string) string { return strings.ToLower(name) }

// retryAfter is d in whole seconds, rounded up, for the Retry-After header.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}
