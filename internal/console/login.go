package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/owedhq/owed/internal/session"
)

type loginData struct {
	Next, Name string
}

// safeNext keeps a login's return address on the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix
	}
	return next
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.o.Token == "" {
		http.Error(w, "no login here: the console is behind a reverse proxy ("+c.o.TrustedHeader+")", http.StatusNotFound)
		return
	}
	c.render(w, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

// login checks the operator token and starts a session. The name is what
// the audit trail records for this operator. A source or name locked out
// by earlier wrong tokens is refused before the token is looked at.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.o.Token == "" {
		http.NotFound(w, r)
		return
	}
	next, name := safeNext(r.PostFormValue("next")), strings.TrimSpace(r.PostFormValue("operator"))
	fail := func(status int, msg string) {
		c.render(w, status, "login", page{Title: "Log in", Error: msg, Data: loginData{Next: next, Name: name}})
	}
	if !sameOrigin(r) {
		fail(http.StatusForbidden, "the login form came from another site")
		return
	}
	if !validName(name) {
		fail(http.StatusBadRequest, "give your name (up to 128 printable characters): the audit trail records it with each action")
		return
	}
	if d := c.auth.throttle.lockedOut(r, name); d > 0 {
		c.o.Log.Warn().Str("operator", name).Str("remote", r.RemoteAddr).Msg("console: login refused: too many wrong tokens")
		w.Header().Set("Retry-After", retryAfter(d))
		fail(http.StatusTooManyRequests, "too many wrong tokens from this address or for this name: try again in "+retryAfter(d)+" s")
		return
	}
	if !c.auth.token.Matches(r.PostFormValue("token")) {
		c.auth.throttle.failed(r, name, "wrong_token")
		c.o.Log.Warn().Str("operator", name).Str("remote", r.RemoteAddr).Msg("console: login refused: wrong token")
		fail(http.StatusUnauthorized, "wrong token (OWED_CONSOLE_TOKEN)")
		return
	}
	s, err := c.auth.startSession(w, r, name)
	if err != nil {
		c.o.Log.Error().Err(err).Str("operator", name).Msg("console: login: the session was not recorded")
		fail(http.StatusServiceUnavailable, "the session could not be recorded: "+err.Error())
		return
	}
	c.o.Log.Info().Str("operator", name).Str("remote", r.RemoteAddr).Str("session", short(s.Handle)).Msg("console: login")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout revokes the session on the server, so the cookie is refused from
// now on wherever a copy of it went, and clears it in the browser.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	if ck, err := r.Cookie(CookieName); err == nil {
		if id, ok := c.auth.sessionID(ck.Value); ok {
			s, _, _ := c.auth.sessions.Check(r.Context(), id, c.o.Clock.Now())
			revoked, err := c.auth.sessions.Revoke(r.Context(), session.Handle(id), c.o.Clock.Now())
			if err != nil {
				c.o.Log.Error().Err(err).Str("operator", s.Operator).Msg("console: logout: the session was not revoked")
				http.Error(w, "the session could not be revoked: "+err.Error()+"; try again", http.StatusServiceUnavailable)
				return
			}
			if revoked {
				c.o.Log.Info().Str("operator", s.Operator).Str("session", short(session.Handle(id))).Msg("console: logout")
			}
		}
	}
	clearSession(w, r)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
