// Package console is the operators' web console, served by the sweeper on
// its operator listener (OWED_METRICS_ADDR) under /console/, never on the
// public port: a live dashboard (backlog, lag, duplicates, dead letters,
// the provider pace, sends per minute with the last hour's chart, and the
// history charts of the last hour or day, history.go), a tenant's
// notifications filtered and paged, each one's timeline and its actions
// (cancel, reschedule, send now, redrive), a row held for quiet hours
// saying until when and each tenant's send windows (quiethours.go), the
// dead letters with filtered and bulk redrive and delete, pausing sends per provider account or tenant,
// and the operators' sessions (sessions.go: kept in owed_console_sessions,
// shared by every replica, so logging out or revoking ends them everywhere
// and a restart keeps them; wrong tokens are throttled, throttle.go).
// Pages are rendered on the
// server from embedded templates, light or dark as the system prefers, and
// fit a 390 px phone; the only script-like thing is the dashboard's meta
// refresh.
//
// Every action runs the code owedctl runs (internal/ops), asks for a
// confirmation, passes the CSRF guard (auth.go) and writes an audit line
// (ops.Record: the log and owed_operator_audit). Another tenant's payload is
// never shown unless an operator asks for it, with a reason, which is
// audited. Without a token or a trusted header configured the console
// answers 404 and logs how to enable it.
package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/session"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

// RefreshDefault is how often the dashboard reloads itself; its figures are
// read at most once per half of it, however many operators watch.
const RefreshDefault = 10 * time.Second

// dashboardTimeout bounds one reading of the dashboard's figures; the queue's
// own bound (ops.QueueStatsTimeout) fits inside it.
const dashboardTimeout = 15 * time.Second

// Options are the console's parts and settings.
type Options struct {
	// Ledger is the ledger over on-call's login (owed_operator), its Reads
	// and Actions roles (a *ledger.Ledger has both): the console's reads,
	// actions and audit lines, and its sessions (owed_console_sessions),
	// run as that login.
	Ledger ops.Ledger
	// Reads is where the pages that only read (the dashboard, the
	// notification pages) read from: a replica's ledger
	// (OWED_READ_DATABASE_URL), so an operator's reads never load the
	// primary that delivers. nil: Ledger. Actions and their audit lines
	// always go to Ledger.
	Reads ledger.HasReads
	Queue queue.Queue
	// Token is the operator token (OWED_CONSOLE_TOKEN); TrustedHeader the
	// reverse proxy's header naming the operator
	// (OWED_CONSOLE_TRUSTED_HEADER). With neither, the console is off.
	Token, TrustedHeader string
	Log                  zerolog.Logger
	Clock                clock.Clock
	// Refresh is the dashboard's reload interval (RefreshDefault when 0).
	Refresh time.Duration
	// Metrics, when set, registers the console's series: the wrong tokens
	// and the refusals of the login throttle.
	Metrics prometheus.Registerer
}

//go:embed templates/*.html templates/*.tmpl static/*
var assets embed.FS

// Console serves the pages.
type Console struct {
	o     Options
	auth  auth
	mux   *http.ServeMux
	pages map[string]*template.Template
	off   sync.Once
	// accounts and tenants are the pace's operator pauses (pauses.go).
	accounts *pace.Accounts
	tenants  *pace.Tenants
	dash     *service.Cache[dashData]
	hist     *service.Cache[[]ledger.Sample]
}

// New returns the console's handler, to be mounted at Prefix.
func New(o Options) *Console {
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Refresh <= 0 {
		o.Refresh = RefreshDefault
	}
	var sessions *session.Store
	if o.Ledger != nil {
		sessions = session.NewStore(o.Ledger.ReadsRole().DB())
	}
	if o.Reads == nil {
		o.Reads = o.Ledger
	}
	c := &Console{o: o, auth: newAuth(o.Token, o.TrustedHeader, o.Clock.Now, sessions, newThrottle(o.Clock.Now, o.Metrics)),
		mux: http.NewServeMux(), pages: parsePages()}
	if o.Ledger != nil {
		c.accounts, c.tenants = pace.NewAccounts(o.Ledger.ReadsRole().DB(), o.Clock), pace.NewTenants(o.Ledger.ReadsRole().DB(), o.Clock)
	}
	c.dash = &service.Cache[dashData]{Fetch: c.readDashboard, TTL: o.Refresh / 2, FetchTimeout: dashboardTimeout, Clock: o.Clock}
	c.hist = &service.Cache[[]ledger.Sample]{Fetch: c.readHistory, TTL: historyTTL, FetchTimeout: dashboardTimeout, Clock: o.Clock}
	if !c.Enabled() {
		o.Log.Info().Msg(disabledMessage)
	}
	static, _ := fs.Sub(assets, "static")
	c.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	c.mux.HandleFunc("POST "+Prefix+"login", c.login)
	c.mux.HandleFunc("POST "+Prefix+"logout", c.logout)
	c.mux.HandleFunc("GET "+Prefix+"{$}", c.authed(c.dashboard))
	c.mux.HandleFunc("GET "+Prefix+"notifications", c.authed(c.notifications))
	c.mux.HandleFunc("GET "+Prefix+"notifications/{id}", c.authed(c.notification))
	c.mux.HandleFunc("POST "+Prefix+"notifications/{id}/payload", c.authed(c.revealPayload))
	c.mux.HandleFunc("POST "+Prefix+"notifications/{id}/action", c.authed(c.notificationAction))
	c.mux.HandleFunc("GET "+Prefix+"dead-letters", c.authed(c.deadLetters))
	c.mux.HandleFunc("GET "+Prefix+"dead-letters/{id}", c.authed(c.deadLetter))
	c.mux.HandleFunc("POST "+Prefix+"dead-letters/action", c.authed(c.deadLetterAction))
	c.mux.HandleFunc("GET "+Prefix+"pauses", c.authed(c.pauses))
	c.mux.HandleFunc("POST "+Prefix+"pauses/action", c.authed(c.pauseAct))
	c.mux.HandleFunc("GET "+Prefix+"audit", c.authed(c.audit))
	c.mux.HandleFunc("GET "+Prefix+"quiet-hours", c.authed(c.quietHours))
	c.mux.HandleFunc("GET "+Prefix+"sessions", c.authed(c.sessionsPage))
	c.mux.HandleFunc("POST "+Prefix+"sessions/revoke", c.authed(c.revokeSession))
	return c
}

const disabledMessage = "console: off (answers 404): set OWED_CONSOLE_TOKEN (at least 16 characters) " +
	"or OWED_CONSOLE_TRUSTED_HEADER to serve it on the operator listener under /console/ (docs/console.md)"

// Enabled says whether a token or a trusted header is configured.
func (c *Console) Enabled() bool { return c.o.Token != "" || c.o.TrustedHeader != "" }

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.Enabled() {
		c.off.Do(func() { c.o.Log.Warn().Str("path", r.URL.Path).Msg(disabledMessage) })
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// handler is a page handler that knows who asks.
type handler func(w http.ResponseWriter, r *http.Request, op operator)

// authed lets recognised operators through: others are sent to the login
// form (a browser with the token configured), or answered 401, or 429 while
// their address is locked out for wrong bearer tokens; a POST must pass the
// CSRF guard as well.
func (c *Console) authed(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		op, ok, why := c.auth.identify(r)
		switch {
		case ok:
		case why.wait > 0:
			w.Header().Set("Retry-After", retryAfter(why.wait))
			http.Error(w, "too many wrong tokens from this address: try again in "+retryAfter(why.wait)+" s", http.StatusTooManyRequests)
			return
		case why.err != nil:
			c.o.Log.Error().Err(why.err).Str("path", r.URL.Path).Msg("console: the session store cannot be read")
			http.Error(w, "the console's sessions cannot be read: try again", http.StatusServiceUnavailable)
			return
		default:
			if why.bad {
				c.o.Log.Warn().Str("path", r.URL.Path).Str("remote", r.RemoteAddr).Msg("console: refused a wrong credential")
			}
			if r.Method == http.MethodGet && c.o.Token != "" && r.Header.Get("Authorization") == "" {
				if why.bad {
					clearSession(w, r)
				}
				http.Redirect(w, r, Prefix+"login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "unauthorized: log in at "+Prefix+"login or send Authorization: Bearer <OWED_CONSOLE_TOKEN>", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && !c.auth.checkPost(r, op) {
			c.o.Log.Warn().Str("operator", op.Name).Str("path", r.URL.Path).Msg("console: refused a POST without a valid CSRF field or from another origin")
			http.Error(w, "forbidden: the form is stale or came from another site; reload the page and try again", http.StatusForbidden)
			return
		}
		h(w, r, op)
	}
}

// page is what every template gets.
type page struct {
	Title    string
	Operator operator
	CSRF     string
	Now      time.Time
	Refresh  int
	Error    string
	Data     any
}

func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		c.o.Log.Error().Err(err).Str("page", name).Msg("console: render")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	buf.WriteTo(w)
}

// show renders a page for op.
func (c *Console) show(w http.ResponseWriter, op operator, status int, name, title string, data any, errText string) {
	c.render(w, status, name, page{Title: title, Operator: op, CSRF: c.auth.csrf(op), Now: c.o.Clock.Now().UTC(),
		Error: errText, Data: data})
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"stamp": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				if v.IsZero() {
					return "-"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			case *time.Time:
				if v == nil || v.IsZero() {
					return "-"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			}
			return "-"
		},
		"dur": func(d time.Duration) string {
			if d >= time.Second {
				return d.Round(time.Second).String()
			}
			return d.Round(time.Millisecond).String()
		},
		"dash":  dash,
		"join":  strings.Join,
		"deref": func(p *int64) int64 { return *p },
		"sub":   func(a, b int) int { return a - b },
		"short": short,
	}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		out[base] = template.Must(template.New(base).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/*.tmpl", n))
	}
	return out
}
