package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/owedhq/owed/internal/service"
)

// Who may use the console, and how a browser proves it:
//
//   - A trusted reverse proxy's header (Options.TrustedHeader, e.g.
//     X-Forwarded-User), honoured only when it is configured: the proxy
//     authenticated the operator and names them. The console must then be
//     reachable only through that proxy.
//   - The operator token (Options.Token): "Authorization: Bearer <token>"
//     on each request (scripts), or the login form, which sets a session
//     cookie: HttpOnly, SameSite=Strict, signed with a key derived from the
//     token, so changing the token ends every session.
//
// Every POST also needs the form's CSRF field, a MAC of the operator's
// name, and an Origin, when the browser sends one, of this very host; a
// bearer request, which no browser sends on its own, needs the Origin
// check alone.

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
}

type auth struct {
	token  service.Bearer
	header string
	// key signs sessions and CSRF fields: derived from the token when there
	// is one, so every replica agrees and a new token ends old sessions;
	// random per process otherwise.
	key []byte
	now func() time.Time
}

func newAuth(token, header string, now func() time.Time) auth {
	a := auth{token: service.NewBearer(token), header: header, now: now}
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

// identify says who r comes from; ok is false when nobody is recognised,
// and bad is true when a credential was offered and is wrong.
func (a auth) identify(r *http.Request) (op operator, ok, bad bool) {
	if a.header != "" {
		if name := r.Header.Get(a.header); name != "" {
			if !validName(name) {
				return operator{}, false, true
			}
			return operator{Name: name, Via: "proxy"}, true, false
		}
	}
	if tok, has := service.BearerToken(r); has {
		if !a.token.Matches(tok) {
			return operator{}, false, true
		}
		return operator{Name: "bearer", Via: "bearer"}, true, false
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if name, valid := a.session(c.Value); valid {
			return operator{Name: name, Via: "session"}, true, false
		}
		return operator{}, false, true
	}
	return operator{}, false, false
}

// newSession is the cookie value of name's login: name, expiry, MAC.
func (a auth) newSession(name string) string {
	exp := strconv.FormatInt(a.now().Add(SessionTTL).Unix(), 10)
	enc := base64.RawURLEncoding.EncodeToString([]byte(name))
	return enc + "." + exp + "." + a.mac("session", name, exp)
}

func (a auth) session(v string) (string, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || err2 != nil || a.now().Unix() >= exp {
		return "", false
	}
	name := string(raw)
	if !hmac.Equal([]byte(parts[2]), []byte(a.mac("session", name, parts[1]))) || !validName(name) {
		return "", false
	}
	return name, true
}

// csrf is the CSRF field of op's forms.
func (a auth) csrf(op operator) string { return a.mac("csrf", op.Via, op.Name) }

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

func (a auth) setSession(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: a.newSession(name), Path: Prefix,
		MaxAge: int(SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}
