package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/console"
)

// sessionCookie is the session cookie c holds for the console at u.
func sessionCookie(t *testing.T, c *http.Client, u string) *http.Cookie {
	t.Helper()
	parsed, _ := url.Parse(u + console.Prefix)
	for _, ck := range c.Jar.Cookies(parsed) {
		if ck.Name == console.CookieName {
			return ck
		}
	}
	t.Fatal("no session cookie")
	return nil
}

// withCookie GETs path with only the cookie ck, as a copy of it taken
// elsewhere would.
func withCookie(t *testing.T, b *bundle, path string, ck *http.Cookie) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", b.srv.URL+path, nil)
	req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Logging out revokes the session on the server: a copy of the cookie
// taken before the logout no longer opens the console.
func TestLogoutRevokesTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	c := b.login(t, "alice")
	ck := sessionCookie(t, c, b.srv.URL)
	if resp := withCookie(t, b, "/console/", ck); resp.StatusCode != http.StatusOK {
		t.Fatalf("the session cookie before the logout answered %d, want 200", resp.StatusCode)
	}
	if resp, _ := do(t, c, "POST", b.srv.URL+"/console/logout", url.Values{}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout answered %d, want 303", resp.StatusCode)
	}
	if resp := withCookie(t, b, "/console/", ck); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
		t.Errorf("the cookie after the logout answered %d to %q, want 303 to the login", resp.StatusCode, resp.Header.Get("Location"))
	}
	if !strings.Contains(b.log.String(), `"console: logout"`) {
		t.Errorf("no logout log line: %s", b.log.String())
	}
}

// serve sends one request straight to the console, from remote, so a test
// can choose the source address.
func (b *bundle) serve(t *testing.T, method, path, remote string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	req.RemoteAddr = remote
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	b.console.ServeHTTP(rec, req)
	return rec
}

func loginForm(name, tok string) url.Values {
	return url.Values{"operator": {name}, "token": {tok}, "next": {"/console/"}}
}

// A burst of wrong tokens locks their source address and operator name out:
// after LoginFailureBurst wrong answers every attempt is 429 with
// Retry-After, the right token too, until a try is earned back. Another
// source with another name is not locked out, and each lock holds on its
// own: the locked name from another source, and another name from the
// locked source, are refused.
func TestWrongTokensLockTheSourceAndTheNameOut(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	b := setup(t, token, "", func(o *console.Options) { o.Clock = clk })
	const guesser, other = "192.0.2.10:40000", "198.51.100.7:50000"
	codes := map[int]int{}
	for i := range 200 {
		rec := b.serve(t, "POST", "/console/login", guesser, loginForm("mallory", "wrong-token-"+strconv.Itoa(i)+"-0123456789"), nil)
		codes[rec.Code]++
	}
	if codes[http.StatusUnauthorized] != console.LoginFailureBurst || codes[http.StatusTooManyRequests] != 200-console.LoginFailureBurst {
		t.Errorf("200 wrong tokens were answered %v, want %d × 401 then 429", codes, console.LoginFailureBurst)
	}
	rec := b.serve(t, "POST", "/console/login", guesser, loginForm("mallory", token), nil)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("the right token after 200 wrong ones answered %d, want 429", rec.Code)
	}
	if s, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || s < 1 || s > int(console.LoginFailureRefill/time.Second) {
		t.Errorf("Retry-After %q, want whole seconds up to %s", rec.Header().Get("Retry-After"), console.LoginFailureRefill)
	}
	for _, c := range []struct {
		what, remote, name string
		want               int
	}{
		{"another name from the locked source", guesser, "alice", http.StatusTooManyRequests},
		{"the locked name from another source", other, "mallory", http.StatusTooManyRequests},
		{"another name from another source", other, "alice", http.StatusSeeOther},
	} {
		if rec := b.serve(t, "POST", "/console/login", c.remote, loginForm(c.name, token), nil); rec.Code != c.want {
			t.Errorf("the right token for %s answered %d, want %d", c.what, rec.Code, c.want)
		}
	}
	// A bearer token is throttled by its source alone.
	bearer := map[string]string{"Authorization": "Bearer " + token}
	if rec := b.serve(t, "GET", "/console/", guesser, nil, bearer); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("the right bearer token from the locked source answered %d, want 429 with Retry-After", rec.Code)
	}
	if rec := b.serve(t, "GET", "/console/", other, nil, bearer); rec.Code != http.StatusOK {
		t.Errorf("the right bearer token from another source answered %d, want 200", rec.Code)
	}
	// One refill later the source and the name have one try again.
	clk.Advance(console.LoginFailureRefill)
	if rec := b.serve(t, "POST", "/console/login", guesser, loginForm("mallory", token), nil); rec.Code != http.StatusSeeOther {
		t.Errorf("the right token a refill later answered %d, want 303", rec.Code)
	}
	if got := counter(t, b, "owed_console_login_failures_total", "wrong_token"); got != console.LoginFailureBurst {
		t.Errorf("owed_console_login_failures_total{reason=wrong_token} = %v, want %d: a locked-out attempt is not a checked one", got, console.LoginFailureBurst)
	}
	if got := counter(t, b, "owed_console_login_throttled_total", "source"); got != 200-console.LoginFailureBurst+3 {
		t.Errorf("owed_console_login_throttled_total{limit=source} = %v, want %d", got, 200-console.LoginFailureBurst+3)
	}
	if got := counter(t, b, "owed_console_login_throttled_total", "operator"); got != 1 {
		t.Errorf("owed_console_login_throttled_total{limit=operator} = %v, want 1", got)
	}
}

// Wrong bearer tokens lock their source out of the bearer path as well.
func TestWrongBearerTokensLockTheSourceOut(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	b := setup(t, token, "", func(o *console.Options) { o.Clock = clk })
	const guesser = "[2001:db8::1]:40000"
	for i := range console.LoginFailureBurst {
		if rec := b.serve(t, "GET", "/console/", guesser, nil, map[string]string{"Authorization": "Bearer wrong-" + strconv.Itoa(i) + "-0123456789"}); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong bearer token %d answered %d, want 401", i, rec.Code)
		}
	}
	// Another address of the same /64 is the same source.
	if rec := b.serve(t, "GET", "/console/", "[2001:db8::2]:40000", nil, map[string]string{"Authorization": "Bearer " + token}); rec.Code != http.StatusTooManyRequests {
		t.Errorf("the right bearer token from the locked /64 answered %d, want 429", rec.Code)
	}
	if got := counter(t, b, "owed_console_login_failures_total", "wrong_bearer"); got != console.LoginFailureBurst {
		t.Errorf("owed_console_login_failures_total{reason=wrong_bearer} = %v, want %d", got, console.LoginFailureBurst)
	}
}

// counter is the registry's counter name{label}.
func counter(t *testing.T, b *bundle, name, label string) float64 {
	t.Helper()
	fams, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

var sessionRow = regexp.MustCompile(`(?s)<tr><td><code>[^<]*</code>[^<]*(?:<small>[^<]*</small>)?</td><td>([^<]*)</td>.*?name="id" value="([^"]+)"`)

// The sessions page lists who is logged in, and revoking one of them ends
// it at once, with an audit line.
func TestSessionsAreListedAndRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	alice, bob := b.login(t, "alice"), b.login(t, "bob")
	bobCookie := sessionCookie(t, bob, b.srv.URL)
	_, page := do(t, alice, "GET", b.srv.URL+"/console/sessions", nil, nil)
	ids := map[string]string{}
	for _, m := range sessionRow.FindAllStringSubmatch(page, -1) {
		ids[m[1]] = m[2]
	}
	if len(ids) != 2 || ids["alice"] == "" || ids["bob"] == "" {
		t.Fatalf("the sessions page lists %v, want alice's and bob's: %s", ids, page)
	}
	form := url.Values{"csrf": {csrfOf(t, page)}, "id": {ids["bob"]}}
	resp, body := do(t, alice, "POST", b.srv.URL+"/console/sessions/revoke", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Revoked bob") {
		t.Fatalf("the revocation answered %d: %s", resp.StatusCode, body)
	}
	if resp := withCookie(t, b, "/console/", bobCookie); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("bob's cookie after the revocation answered %d, want 303 to the login", resp.StatusCode)
	}
	if resp, _ := do(t, alice, "GET", b.srv.URL+"/console/", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("alice's own session answered %d after she revoked bob's", resp.StatusCode)
	}
	actions, err := b.stack.Ledger.OperatorActions(context.Background(), 10)
	if err != nil || len(actions) != 1 || actions[0].Action != "session_revoke" || actions[0].Operator != "alice" ||
		!strings.HasPrefix(actions[0].Target, "operator=bob session=") {
		t.Errorf("audit rows %+v (%v), want alice's session_revoke of bob", actions, err)
	}
	// A session is revoked once.
	if resp, _ := do(t, alice, "POST", b.srv.URL+"/console/sessions/revoke", form, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("revoking the revoked session again answered %d, want 404", resp.StatusCode)
	}
}

// Sessions are kept in the database: a login on one console is honoured by
// a second console process over the same database (another replica, or
// this one restarted), and a logout on the second refuses the cookie on the
// first.
func TestSessionsAreSharedBetweenConsoles(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	c := b.login(t, "alice")
	ck := sessionCookie(t, c, b.srv.URL)
	second := console.New(console.Options{Ledger: b.stack.Operator, Queue: b.stack.Queue, Token: token, Log: zerolog.Nop()})
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, second)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	other := &bundle{stack: b.stack, console: second, srv: srv}
	if resp := withCookie(t, other, "/console/", ck); resp.StatusCode != http.StatusOK {
		t.Fatalf("the first console's session cookie on the second answered %d, want 200", resp.StatusCode)
	}
	_, page := do(t, c, "GET", b.srv.URL+"/console/sessions", nil, nil)
	if !strings.Contains(page, "alice") || !strings.Contains(page, "(this one)") {
		t.Errorf("the sessions page lacks alice's own session: %s", page)
	}
	// Log out through the second console: the first refuses the cookie.
	jar := c.Jar
	u, _ := url.Parse(srv.URL + console.Prefix)
	jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: console.Prefix}})
	if resp, _ := do(t, c, "POST", srv.URL+"/console/logout", url.Values{}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout on the second console answered %d, want 303", resp.StatusCode)
	}
	if resp := withCookie(t, b, "/console/", ck); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the cookie on the first console after a logout on the second answered %d, want 303 to the login", resp.StatusCode)
	}
}
