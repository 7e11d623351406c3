package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/session"
)

// Who may use the console, and how a browser proves it:
//
//   - A trusted reverse proxy's header (Options.TrustedHeader, e.g.
//     X-Forwarded-User), honoured only when it is configured: the proxy
//     authenticated the operator and names them. The console must then be
//     reachable only through that proxy.
//   - The operator token (Options.Token): "Authorization: Bearer <token>"
//     on each request (scripts), or the login form, which starts a session
//     (sessions.go: in owed_console_sessions, shared by every replica)
//     and sets its cookie: HttpOnly, SameSite=Strict, the
//     session's id and a MAC of it keyed on the token, so changing the
//     token ends every session. Logging out revokes the session on the
//     server. Wrong tokens are throttled (throttle.go).
//
// Every POST also needs the form's CSRF field, a MAC of the operator's
// name and session, and an Origin, when the browser sends one, of this very
// host; a bearer request, which no browser sends on its own, needs the
// Origin check alone.

// CookieName is the console's session cookie.
const CookieName = "owed_console"

// SessionTTL is how long a login lasts.
const SessionTTL = 12 * time.Hour

// MinTokenLength is the shortest operator token accepted.
const MinTokenLength = 16

// maxOperatorName bounds the name an operator gives at login or a proxy
// sends.
const maxOperatorName = 128

// operator is who a request comes from.
type operator struct {
	Name string
	// Via is how they were recognised: proxy, bearer or session.
	Via string
	// Session is the session's id when Via is session.
	Session string
}

type auth struct {
	token  service.Bearer
	header string
	// key signs session cookies and CSRF fields: derived from the token
	// when there is one, so every replica agrees and a new token ends old
	// sessions; random per process otherwise.
	key      []byte
	now      func() time.Time
	sessions *session.Store
	throttle *throttle
}

func newAuth(token, header string, now func() time.Time, sessions *session.Store, th *throttle) auth {
	a := auth{token: service.NewBearer(token), header: header, now: now, sessions: sessions, throttle: th}
	if token != "" {
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("owed console session key"))
		a.key = m.Sum(nil)
	} else {
		a.key = make([]byte, 32)
		rand.Read(a.key)
	}
	return a
}

func (a auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// refusal says why identify recognised nobody.
type refusal struct {
	// bad is true when a credential was offered and is wrong (or its
	// session has ended).
	bad bool
	// wait is how long the request's source is still locked out after
	// too many wrong tokens; its token was not even checked.
	wait time.Duration
	// err is the session store's failure.
	err error
}

// identify says who r comes from; ok is false when nobody is recognised,
// and why then says whether a credential was offered and refused.
func (a auth) identify(r *http.Request) (op operator, ok bool, why refusal) {
	if a.header != "" {
		if name := r.Header.Get(a.header); name != "" {
			if !validName(name) {
				return operator{}, false, refusal{bad: true}
			}
			return operator{Name: name, Via: "proxy"}, true, refusal{}
		}
	}
	if tok, has := service.BearerToken(r); has {
		if d := a.throttle.lockedOut(r, ""); d > 0 {
			return operator{}, false, refusal{wait: d}
		}
		if !a.token.Matches(tok) {
			a.throttle.failed(r, "", "wrong_bearer")
			return operator{}, false, refusal{bad: true}
		}
		return operator{Name: "bearer", Via: "bearer"}, true, refusal{}
	}
	if c, err := r.Cookie(CookieName); err == nil {
		id, valid := a.sessionID(c.Value)
		if !valid {
			return operator{}, false, refusal{bad: true}
		}
		s, found, err := a.sessions.Check(r.Context(), id, a.now())
		if err != nil {
			return operator{}, false, refusal{err: err}
		}
		if !found {
			return operator{}, false, refusal{bad: true}
		}
		return operator{Name: s.Operator, Via: "session", Session: id}, true, refusal{}
	}
	return operator{}, false, refusal{}
}

// startSession records a session for name and sets its cookie.
func (a auth) startSession(w http.ResponseWriter, r *http.Request, name string) (session.Session, error) {
	now := a.now()
	id, err := session.NewID()
	if err != nil {
		return session.Session{}, err
	}
	s, err := a.sessions.Create(r.Context(), id, name, peer(r), now, now.Add(SessionTTL))
	if err != nil {
		return session.Session{}, err
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: a.cookieValue(id), Path: Prefix,
		MaxAge: int(SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return s, nil
}

// cookieValue is the session cookie of session id: the id and its MAC.
func (a auth) cookieValue(id string) string { return id + "." + a.mac("session", id) }

// sessionID is the id a session cookie names, when this console signed it.
func (a auth) sessionID(v string) (string, bool) {
	id, sum, ok := strings.Cut(v, ".")
	if !ok || id == "" || !hmac.Equal([]byte(sum), []byte(a.mac("session", id))) {
		return "", false
	}
	return id, true
}

// peer is r's remote address without the port.
func peer(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// csrf is the CSRF field of op's forms.
func (a auth) csrf(op operator) string { return a.mac("csrf", op.Via, op.Name, op.Session) }

// sameOrigin says whether r's Origin, when the browser sent one, is this
// host; a browser that sends none must not say the request is cross-site.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin" || site == "none"
}

// checkPost is the CSRF guard of every POST: the Origin, and the form's
// CSRF field unless the operator came with a bearer token.
func (a auth) checkPost(r *http.Request, op operator) bool {
	if !sameOrigin(r) {
		return false
	}
	if op.Via == "bearer" {
		return true
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(a.csrf(op)))
}

// validName accepts a printable operator name of reasonable length.
func validName(s string) bool {
	if s == "" || len(s) > maxOperatorName {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}
