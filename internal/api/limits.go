package api

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/tenant"
)

// Per-tenant limits: one tenant's requests and rows cannot take the API,
// and the ledger behind it, from the others. Each tenant has its own token
// buckets, whichever token acts for it.
const (
	// TenantRateDefault is OWED_API_TENANT_RATE's default: requests per
	// second, with a burst of one second's worth.
	TenantRateDefault = 50.0
	// TenantRowsPerMinuteDefault is OWED_API_TENANT_ROWS_PER_MINUTE's
	// default: rows scheduled (a schedule's rows, an event's recipients)
	// per minute, with a burst of one minute's worth.
	TenantRowsPerMinuteDefault = 100_000
)

// Limit names, the metric's limit label and the words of a refusal.
const (
	limitRequests = "requests"
	limitRows     = "rows"
)

// Limits bounds one tenant. A zero field is no limit.
type Limits struct {
	// Rate is requests per second (OWED_API_TENANT_RATE).
	Rate float64
	// RowsPerMinute is rows scheduled per minute
	// (OWED_API_TENANT_ROWS_PER_MINUTE); when set, at least
	// ledger.MaxScheduleBatch, so a full request can pass.
	RowsPerMinute int64
}

// checkRate and checkRows name the setting (variable) in their errors.
func checkRate(variable string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%s=%v must be a finite number of requests per second, at least 0 (0 is no limit)", variable, v)
	}
	return nil
}

func checkRows(variable string, v int64) error {
	if v != 0 && (v < ledger.MaxScheduleBatch) {
		return fmt.Errorf("%s=%d must be 0 (no limit) or at least %d, the rows of one request", variable, v,
			ledger.MaxScheduleBatch)
	}
	return nil
}

// Validate names the first unusable field by its variable.
func (l Limits) Validate() error {
	if err := checkRate("OWED_API_TENANT_RATE", l.Rate); err != nil {
		return err
	}
	return checkRows("OWED_API_TENANT_ROWS_PER_MINUTE", l.RowsPerMinute)
}

// LimitOverrides is OWED_API_TENANT_LIMITS: the tenants whose limits differ
// from the defaults, each with the fields it sets.
type LimitOverrides map[string]LimitOverride

// LimitOverride sets some of a tenant's Limits; a nil field keeps the
// default.
type LimitOverride struct {
	Rate          *float64
	RowsPerMinute *int64
}

// limitsSyntax is quoted by every parse error.
const limitsSyntax = `write tenant:rate=N,rows=N entries separated by ";", e.g. ` +
	`"acme:rate=50,rows=100000;globex:rows=0" (rate: requests per second, rows: rows per minute, 0: no limit)`

// Decode parses OWED_API_TENANT_LIMITS (envconfig.Decoder). A tenant id
// may hold ":" (the last one ends it) but not ";".
func (o *LimitOverrides) Decode(s string) error {
	const variable = "OWED_API_TENANT_LIMITS"
	out := LimitOverrides{}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		i := strings.LastIndexByte(entry, ':')
		if i < 0 {
			return fmt.Errorf("%s: %q names no tenant; %s", variable, entry, limitsSyntax)
		}
		id, fields := strings.TrimSpace(entry[:i]), entry[i+1:]
		if err := tenant.Validate(id); err != nil {
			return fmt.Errorf("%s: %q: %v; %s", variable, entry, err, limitsSyntax)
		}
		if _, dup := out[id]; dup {
			return fmt.Errorf("%s: tenant %q is named twice; give each tenant one entry", variable, id)
		}
		var ov LimitOverride
		for _, f := range strings.Split(fields, ",") {
			key, val, ok := strings.Cut(f, "=")
			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			switch {
			case !ok:
				return fmt.Errorf("%s: %q: %q is not key=value; %s", variable, entry, f, limitsSyntax)
			case key == "rate" && ov.Rate == nil:
				v, err := strconv.ParseFloat(val, 64)
				if err == nil {
					err = checkRate(variable+" "+id+":rate", v)
				} else {
					err = fmt.Errorf("%s: %q: rate %q is not a number", variable, entry, val)
				}
				if err != nil {
					return err
				}
				ov.Rate = &v
			case key == "rows" && ov.RowsPerMinute == nil:
				v, err := strconv.ParseInt(val, 10, 64)
				if err == nil {
					err = checkRows(variable+" "+id+":rows", v)
				} else {
					err = fmt.Errorf("%s: %q: rows %q is not a whole number", variable, entry, val)
				}
				if err != nil {
					return err
				}
				ov.RowsPerMinute = &v
			case key == "rate" || key == "rows":
				return fmt.Errorf("%s: %q sets %s twice", variable, entry, key)
			default:
				return fmt.Errorf("%s: %q: unknown key %q (rate or rows); %s", variable, entry, key, limitsSyntax)
			}
		}
		out[id] = ov
	}
	*o = out
	return nil
}

// String writes o in the form Decode reads, tenants in order (for --help
// and logs).
func (o LimitOverrides) String() string {
	ids := make([]string, 0, len(o))
	for id := range o {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		var fields []string
		if r := o[id].Rate; r != nil {
			fields = append(fields, "rate="+strconv.FormatFloat(*r, 'g', -1, 64))
		}
		if n := o[id].RowsPerMinute; n != nil {
			fields = append(fields, "rows="+strconv.FormatInt(*n, 10))
		}
		b.WriteString(id + ":" + strings.Join(fields, ","))
	}
	return b.String()
}

// Limiter holds each tenant's token buckets and counts its refusals
// (owed_api_rate_limited_total{tenant,limit}; register it as a
// prometheus.Collector). It is safe for concurrent use. The buckets are
// this process's: behind a load balancer, each sweeper grants a tenant its
// limits.
type Limiter struct {
	def  Limits
	over LimitOverrides

	mu      sync.Mutex
	buckets map[string]*buckets
	// swept is when idle buckets were last dropped.
	swept time.Time

	refused *prometheus.CounterVec
}

// buckets are one tenant's; nil is no limit.
type buckets struct{ requests, rows *rate.Limiter }

// sweepEvery is how often a Limiter drops the buckets that are full again:
// a full bucket is what a tenant's first request makes, so dropping one
// changes no answer, and tenants that stopped calling cost nothing.
const sweepEvery = time.Minute

// NewLimiter returns the limiter of def for every tenant, but the fields
// over sets for its tenants.
func NewLimiter(def Limits, over LimitOverrides) *Limiter {
	return &Limiter{def: def, over: over, buckets: map[string]*buckets{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owed_api_rate_limited_total",
			Help: "API requests refused with 429 because their tenant was over a limit (OWED_API_TENANT_*), by tenant and limit (requests or rows)."},
			[]string{"tenant", "limit"})}
}

// Describe and Collect make the Limiter the collector of its metric.
func (l *Limiter) Describe(ch chan<- *prometheus.Desc) { l.refused.Describe(ch) }
func (l *Limiter) Collect(ch chan<- prometheus.Metric) { l.refused.Collect(ch) }

// limits is tenant's Limits: the defaults with its override applied.
func (l *Limiter) limits(id string) Limits {
	out := l.def
	if ov, ok := l.over[id]; ok {
		if ov.Rate != nil {
			out.Rate = *ov.Rate
		}
		if ov.RowsPerMinute != nil {
			out.RowsPerMinute = *ov.RowsPerMinute
		}
	}
	return out
}

// bucketsOf returns tenant's buckets, made on first use.
func (l *Limiter) bucketsOf(id string, now time.Time) *buckets {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) >= sweepEvery {
		l.swept = now
		for k, b := range l.buckets {
			if full(b.requests, now) && full(b.rows, now) {
				delete(l.buckets, k)
			}
		}
	}
	b := l.buckets[id]
	if b == nil {
		lim := l.limits(id)
		b = &buckets{}
		if lim.Rate > 0 {
			b.requests = rate.NewLimiter(rate.Limit(lim.Rate), max(1, int(math.Ceil(lim.Rate))))
		}
		if lim.RowsPerMinute > 0 {
			b.rows = rate.NewLimiter(rate.Limit(float64(lim.RowsPerMinute)/60), int(lim.RowsPerMinute))
		}
		l.buckets[id] = b
	}
	return b
}

func full(lim *rate.Limiter, now time.Time) bool {
	return lim == nil || lim.TokensAt(now) >= float64(lim.Burst())
}

// take takes n tokens of tenant's limit (limitRequests or limitRows) at
// now. When the bucket has too few it takes none and says how long until
// it has enough.
func (l *Limiter) take(id, limit string, n int, now time.Time) (wait time.Duration, ok bool) {
	b := l.bucketsOf(id, now)
	lim := b.requests
	if limit == limitRows {
		lim = b.rows
	}
	if lim == nil || n == 0 {
		return 0, true
	}
	res := lim.ReserveN(now, n)
	switch {
	case !res.OK():
		// More than the burst, which Limits.Validate rules out for a valid
		// request (a batch is within a minute's rows): nothing to wait for
		// would help, so say a minute.
		wait = time.Minute
	case res.DelayFrom(now) > 0:
		wait = res.DelayFrom(now)
		res.CancelAt(now)
	default:
		return 0, true
	}
	l.refused.WithLabelValues(id, limit).Inc()
	return wait, false
}

// rateLimited is the 429 of a tenant over limit, retryable after wait.
func rateLimited(id, limit string, lim Limits, wait time.Duration) *apiError {
	secs := max(1, int64(math.Ceil(wait.Seconds())))
	what := fmt.Sprintf("%g requests per second (OWED_API_TENANT_RATE, OWED_API_TENANT_LIMITS)", lim.Rate)
	if limit == limitRows {
		what = fmt.Sprintf("%d rows per minute (OWED_API_TENANT_ROWS_PER_MINUTE, OWED_API_TENANT_LIMITS)", lim.RowsPerMinute)
	}
	return &apiError{Status: http.StatusTooManyRequests, Code: codeRateLimited, retryAfter: secs,
		Message: fmt.Sprintf("tenant %q is over its limit of %s; retry after %d s (Retry-After)", id, what, secs)}
}

// admitRequest charges one request to tenant; nil when l is nil.
func (l *Limiter) admitRequest(id string, now time.Time) *apiError {
	if l == nil {
		return nil
	}
	if wait, ok := l.take(id, limitRequests, 1, now); !ok {
		return rateLimited(id, limitRequests, l.limits(id), wait)
	}
	return nil
}

// admitRows charges n scheduled rows to tenant; nil when l is nil.
func (l *Limiter) admitRows(id string, n int, now time.Time) *apiError {
	if l == nil {
		return nil
	}
	if wait, ok := l.take(id, limitRows, n, now); !ok {
		return rateLimited(id, limitRows, l.limits(id), wait)
	}
	return nil
}
