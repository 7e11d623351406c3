package console

import (
	"net/http"
	"strings"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/session"
)

// Sessions live on the server, in owed_console_sessions (internal/session):
// the cookie carries a session's id and a MAC of it, and only a session the
// table holds, unexpired and not revoked, lets the cookie in. Every sweeper
// replica reads the same table, so a login on one replica is honoured by
// the others and survives a restart, and logging out or revoking a session
// refuses its cookie everywhere at once. An unknown session is refused,
// never trusted on its MAC alone.
//
// The table holds only the SHA-256 of each id (its handle), which is what
// the sessions page shows and the revoke form sends: reading the page gives
// nobody a cookie.

type sessionsData struct {
	Sessions []session.Session
	// Current is the handle of the session the page was asked with, if any.
	Current string
	Result  string
	Audit   string
}

// short is the start of a session's handle, enough to tell sessions apart
// on a page or in a log line.
func short(handle string) string { return handle[:min(len(handle), 8)] }

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, op operator) {
	c.showSessions(w, r, op, http.StatusOK, sessionsData{}, "")
}

func (c *Console) showSessions(w http.ResponseWriter, r *http.Request, op operator, status int, d sessionsData, errText string) {
	list, err := c.auth.sessions.List(r.Context(), c.o.Clock.Now())
	if err != nil {
		errText = strings.TrimPrefix(errText+"; ", "; ") + "the sessions cannot be read: " + err.Error()
	}
	d.Sessions = list
	if op.Session != "" {
		d.Current = session.Handle(op.Session)
	}
	c.show(w, op, status, "sessions", "Sessions", d, errText)
}

// revokeSession ends one session, the operator's own or another's, named by
// its handle, and writes an audit line. It asks for no confirmation:
// revoking costs the session's operator a login, nothing more.
func (c *Console) revokeSession(w http.ResponseWriter, r *http.Request, op operator) {
	ctx := r.Context()
	handle := r.PostFormValue("id")
	now := c.o.Clock.Now()
	list, err := c.auth.sessions.List(ctx, now)
	if err != nil {
		c.showSessions(w, r, op, http.StatusServiceUnavailable, sessionsData{}, "the sessions cannot be read: "+err.Error())
		return
	}
	var s session.Session
	for _, x := range list {
		if x.Handle == handle {
			s = x
		}
	}
	if s.Handle == "" {
		c.showSessions(w, r, op, http.StatusNotFound, sessionsData{}, "no active session by that handle (it may have ended already)")
		return
	}
	if _, err := c.auth.sessions.Revoke(ctx, handle, now); err != nil {
		c.showSessions(w, r, op, http.StatusServiceUnavailable, sessionsData{}, "the session was not revoked: "+err.Error())
		return
	}
	d := sessionsData{Result: "Revoked " + s.Operator + "'s session " + short(s.Handle) + " (from " + s.Source + ")."}
	if err := ops.Record(ctx, c.o.Ledger, c.o.Log, ledger.OperatorAction{Operator: op.Name, Action: "session_revoke",
		Target: "operator=" + s.Operator + " session=" + short(s.Handle), Count: 1}); err != nil {
		d.Audit = "the audit row was not written (the log line was): " + err.Error()
	}
	if op.Session != "" && handle == session.Handle(op.Session) {
		clearSession(w, r)
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		return
	}
	c.showSessions(w, r, op, http.StatusOK, d, "")
}
