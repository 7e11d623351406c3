// Package api is owed's scheduling API: schedule, cancel and reschedule
// notifications, fan an event out to its recipients, and answer "was this
// recipient notified, and when". Routes and bodies are documented in
// docs/api.md.
//
// Every request acts in exactly one tenant's scope. A tenant token can only
// ever name its own tenant (naming another is 403, and another tenant's rows
// are invisible to it under row-level security, so reading one is 404); the
// service token, for a trusted backend, must name the tenant in every request.
// The package never logs or echoes a token, and never writes part of a
// request: each write route is one ledger call, which validates the whole
// input before it writes anything.
package api

import (
	"context"
	_ "embed"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/service"
)

// Options configures the API handler.
type Options struct {
	// Ledger is where notifications are scheduled and read: its
	// Scheduling and Reads roles (a *ledger.Ledger has both). Required.
	Ledger Ledger
	// Tokens authenticates tenant tokens. Nil accepts the service token only.
	Tokens *Tokens
	// ServiceToken (OWED_API_TOKEN) lets a trusted backend act for any tenant
	// it names. Empty disables it.
	ServiceToken string
	// Log receives one line per request; never a token or a payload.
	Log zerolog.Logger
	// Clock tells the time for reschedule's delay_seconds. Nil is
	// clock.Real(). Give the ledger and the Tokens the same clock.
	Clock clock.Clock
	// MaxExpandedBytes (OWED_API_MAX_EXPANDED_BYTES) bounds the bytes of
	// rows one request stands for (see MaxExpandedBytesDefault, its
	// default when zero); a request over it gets 413.
	MaxExpandedBytes int64
	// Limits bounds each tenant's requests and rows (OWED_API_TENANT_*);
	// over a limit is 429 with Retry-After. Nil is no limit.
	Limits *Limiter
	// Metrics, when set, registers the requests' series: how many, and how
	// long they took, by route and status code (never an id or a tenant).
	Metrics prometheus.Registerer
}

// Ledger is the part of the ledger the API calls: its scheduling writes
// and its reads.
type Ledger interface {
	ledger.HasScheduling
	ledger.HasReads
}

type server struct {
	// ledger schedules and changes rows; reads answers the reads.
	ledger *ledger.Scheduling
	reads  *ledger.Reads
	tokens *Tokens
	// service checks the service token; the zero Bearer (no token
	// configured) matches nothing.
	service service.Bearer
	log     zerolog.Logger
	clock   clock.Clock
	mux     *http.ServeMux
	// maxExpanded is Options.MaxExpandedBytes with its default applied.
	maxExpanded int64
	limits      *Limiter
}

// New returns the handler serving every /v1 route.
func New(o Options) http.Handler {
	if o.Ledger == nil {
		panic("api.New: Options.Ledger is required")
	}
	s := &server{ledger: o.Ledger.SchedulingRole(), reads: o.Ledger.ReadsRole(), tokens: o.Tokens, service: service.NewBearer(o.ServiceToken), log: o.Log,
		clock: o.Clock, mux: http.NewServeMux(), limits: o.Limits}
	if s.clock == nil {
		s.clock = clock.Real()
	}
	if s.maxExpanded = o.MaxExpandedBytes; s.maxExpanded <= 0 {
		s.maxExpanded = MaxExpandedBytesDefault
	}
	route := instrument(o.Metrics)
	route(s.mux, "POST /v1/notifications", s.authed(s.schedule))
	route(s.mux, "GET /v1/notifications", s.authed(s.find))
	route(s.mux, "GET /v1/notifications/{id}", s.authed(s.get))
	route(s.mux, "POST /v1/notifications/cancel", s.authed(s.cancel))
	route(s.mux, "POST /v1/notifications/reschedule", s.authed(s.reschedule))
	route(s.mux, "PATCH /v1/notifications", s.authed(s.update))
	route(s.mux, "PATCH /v1/notifications/{id}", s.authed(s.update))
	route(s.mux, "POST /v1/events", s.authed(s.event))
	route(s.mux, "POST /v1/recipients/erase", s.authed(s.erase))
	route(s.mux, "PUT /v1/quiet-hours", s.authed(s.quietHours))
	route(s.mux, "PUT /v1/digests", s.authed(s.setDigest))
	route(s.mux, "GET /v1/digests", s.authed(s.digests))
	route(s.mux, "GET /v1/quiet-hours", s.authed(s.getQuietHours))
	route(s.mux, "GET /v1/openapi.json", serveOpenAPI)
	return s
}

// instrument returns what mounts a route on a mux, counting and timing its
// requests by route (the pattern, never the path: an id in a label would
// make a series per row) and status code (promhttp's instrumentation). A
// nil reg mounts the route alone.
func instrument(reg prometheus.Registerer) func(mux *http.ServeMux, pattern string, h http.HandlerFunc) {
	if reg == nil {
		return func(mux *http.ServeMux, pattern string, h http.HandlerFunc) { mux.HandleFunc(pattern, h) }
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owed_api_requests_total",
		Help: "/v1 requests answered, by route (method and pattern) and status code."}, []string{"route", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "owed_api_request_duration_seconds",
		Help:    "How long /v1 requests took to answer, by route (method and pattern) and status code.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"route", "code"})
	reg.MustRegister(requests, duration)
	return func(mux *http.ServeMux, pattern string, h http.HandlerFunc) {
		route := prometheus.Labels{"route": pattern}
		mux.Handle(pattern, promhttp.InstrumentHandlerCounter(requests.MustCurryWith(route),
			promhttp.InstrumentHandlerDuration(duration.MustCurryWith(route), h)))
	}
}

// openAPI is the contract of every /v1 route and the receipt endpoints,
// served at GET /v1/openapi.json without a token. The API tests validate
// every request and response they make against it (internal/api/openapitest).
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document (a copy: callers may keep it).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(openAPI)
}

// requestInfo collects what the request's log line reports; handlers fill it
// in as they learn the tenant and the row counts.
type requestInfo struct {
	tenant  string
	auth    string
	rows    int
	created int
	err     error
}

type infoKey struct{}

func info(r *http.Request) *requestInfo { return r.Context().Value(infoKey{}).(*requestInfo) }

// statusWriter remembers the status a handler wrote, for the log line.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// headerOnly captures what ServeMux's own 404/405 handler would write, so the
// API can answer with its JSON error shape instead of plain text.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) WriteHeader(code int)        { h.status = code }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }

// ServeHTTP routes r, answering unknown routes and wrong methods with JSON
// errors, and logs one line per request. It names the request (X-Request-Id, service.RequestID)
// and puts a logger carrying that id in the request's context
// (zerolog.Ctx), so every line logged for the request names it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ri := &requestInfo{}
	id := service.RequestID(r)
	w.Header().Set(service.HeaderRequestID, id)
	log := s.log.With().Str("request_id", id).Logger()
	r = r.WithContext(log.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			log.Error().Interface("panic", p).Str("method", r.Method).Str("path", r.URL.Path).Msg("api: handler panicked")
			if sw.status == 0 {
				writeError(sw, &apiError{Status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error"})
			}
		}
		logRequest(log, r, sw.status, ri, time.Since(start))
	}()

	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		probe := &headerOnly{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); probe.status == http.StatusMethodNotAllowed {
			sw.Header().Set("Allow", allow)
			writeError(sw, &apiError{Status: http.StatusMethodNotAllowed, Code: codeMethodNotAllowed,
				Message: r.Method + " is not allowed here; allowed: " + allow})
			return
		}
		writeError(sw, &apiError{Status: http.StatusNotFound, Code: codeNotFound,
			Message: "no such route; see docs/api.md"})
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// logRequest writes the request's one line through its own logger (the
// one carrying request_id).
func logRequest(log zerolog.Logger, r *http.Request, status int, ri *requestInfo, took time.Duration) {
	ev := log.Info()
	if status >= 500 {
		ev = log.Error().Err(ri.err)
	}
	ev = ev.Str("method", r.Method).Str("route", r.Pattern).Str("path", r.URL.Path).Int("status", status).
		Int64("duration_ms", took.Milliseconds())
	if ri.auth != "" {
		ev = ev.Str("auth", ri.auth)
	}
	if ri.tenant != "" {
		ev = ev.Str("tenant", ri.tenant)
	}
	if ri.rows > 0 {
		ev = ev.Int("rows", ri.rows).Int("created", ri.created)
	}
	ev.Msg("api request")
}

// authed wraps a handler with authentication: a request without a valid
// bearer token never reaches it.
func (s *server) authed(h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, e := s.authenticate(r)
		if e != nil {
			writeError(w, e)
			return
		}
		ri := info(r)
		ri.auth = "tenant_token"
		if p.service {
			ri.auth = "service_token"
		} else {
			// A tenant token's request is charged before its body is read,
			// so a tenant over its limit costs no more than the token's
			// look-up. The service token's is charged once the request
			// names its tenant (enter).
			ri.tenant = p.tenant
			if e := s.limits.admitRequest(p.tenant, s.clock.Now()); e != nil {
				writeError(w, e)
				return
			}
		}
		h(w, r, p)
	}
}

// enter records the tenant a request acts in, once resolved, and charges a
// service-token request to it (a tenant token's was charged in authed). On
// a refusal it answers the request itself and returns false.
func (s *server) enter(w http.ResponseWriter, r *http.Request, p principal, tenant string) bool {
	info(r).tenant = tenant
	if !p.service {
		return true
	}
	if e := s.limits.admitRequest(tenant, s.clock.Now()); e != nil {
		writeError(w, e)
		return false
	}
	return true
}

func (s *server) authenticate(r *http.Request) (principal, *apiError) {
	unauthorized := func(msg string) *apiError {
		return &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Message: msg}
	}
	bearer, ok := service.BearerToken(r)
	if !ok {
		return principal{}, unauthorized("missing bearer token: send Authorization: Bearer <token>")
	}
	if s.service.Matches(bearer) {
		return principal{service: true}, nil
	}
	if s.tokens != nil {
		tenant, err := s.tokens.Authenticate(r.Context(), bearer)
		if err == nil {
			return principal{tenant: tenant}, nil
		}
		if !errors.Is(err, ErrInvalidToken) {
			info(r).err = err
			return principal{}, &apiError{Status: http.StatusInternalServerError, Code: codeInternal,
				Message: "could not check the token; retry"}
		}
	}
	return principal{}, unauthorized("invalid or revoked token")
}

// readBody reads a JSON request body of at most MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, &apiError{Status: http.StatusUnsupportedMediaType, Code: codeUnsupportedMedia,
			Message: "send the body as Content-Type: application/json"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Code: codeTooLarge,
			Message: "the body exceeds the limit of 1 MiB; split the batch"}
	case err != nil:
		return nil, &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON,
			Message: "could not read the request body: " + err.Error()}
	}
	return body, nil
}

// fail writes e, or a 500 for an error the client did not cause.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error, name fieldNamer) {
	if e := fromLedger(err, name); e != nil {
		writeError(w, e)
		return
	}
	info(r).err = err
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads this response.
		return
	}
	writeError(w, &apiError{Status: http.StatusInternalServerError, Code: codeInternal,
		Message: "internal error; the request may be retried, it is idempotent"})
}
