package console

import (
	"net/http"
	"net/url"
	"strings"
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

// login checks the operator token and sets the session cookie. The name is
// what the audit trail records for this operator.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.o.Token == "" {
		http.NotFound(w, r)
		return
	}
	next, name := safeNext(r.PostFormValue("next")), strings.TrimSpace(r.PostFormValue("operator"))
	fail := func(status int, msg string) {
		c.render(w, status, "login", page{Title: "Log in", Error: msg, Data: loginData{Next: next, Name: name}})
	}
	switch {
	case !sameOrigin(r):
		fail(http.StatusForbidden, "the login form came from another site")
	case !validName(name):
		fail(http.StatusBadRequest, "give your name (up to 128 printable characters): the audit trail records it with each action")
	case !c.auth.token.Matches(r.PostFormValue("token")):
		c.o.Log.Warn().Str("operator", name).Str("remote", r.RemoteAddr).Msg("console: login refused: wrong token")
		fail(http.StatusUnauthorized, "wrong token (OWED_CONSOLE_TOKEN)")
	default:
		c.auth.setSession(w, r, name)
		c.o.Log.Info().Str("operator", name).Str("remote", r.RemoteAddr).Msg("console: login")
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	clearSession(w, r)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
