package console

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/session"
	"github.com/owedhq/owed/internal/testdb"
)

func testAuth(now time.Time) auth {
	clk := func() time.Time { return now }
	return newAuth("auth-test-token-0123456789", "", clk, nil, newThrottle(clk, nil))
}

func TestSessionCookieIsSignedWithTheToken(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := testAuth(now)
	v := a.cookieValue("c2Vzc2lvbi1pZA")
	if id, ok := a.sessionID(v); !ok || id != "c2Vzc2lvbi1pZA" {
		t.Fatalf("sessionID(%q) = %q, %v; want the id", v, id, ok)
	}
	other := newAuth("another-token-0123456789", "", a.now, a.sessions, a.throttle)
	if _, ok := other.sessionID(v); ok {
		t.Error("a session cookie survives a new token")
	}
	id, sum, _ := strings.Cut(v, ".")
	for _, forged := range []string{"Ym9i." + sum, id + "." + strings.Repeat("0", len(sum)), v + "x", id, "." + sum, ""} {
		if _, ok := a.sessionID(forged); ok {
			t.Errorf("forged session cookie %q accepted", forged)
		}
	}
}

// A session lets its cookie in until it expires or is revoked, and a
// cookie naming a session the store does not hold is refused however well
// it is signed: an unknown session fails closed.
func TestSessionEndsAtExpiryAndRevocation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := testAuth(now)
	a.sessions = session.NewStore(testdb.New(t).Operator)
	ctx := context.Background()
	id, unknown := newID(t), newID(t)
	if _, err := a.sessions.Create(ctx, id, "alice", "192.0.2.1", now, now.Add(SessionTTL)); err != nil {
		t.Fatal(err)
	}
	get := func(a auth, v string) (operator, bool) {
		r := httptest.NewRequest("GET", "/console/", nil)
		r.Header.Set("Cookie", CookieName+"="+v)
		op, ok, _ := a.identify(r)
		return op, ok
	}
	if op, ok := get(a, a.cookieValue(id)); !ok || op.Name != "alice" || op.Session != id {
		t.Fatalf("identify = %+v, %v; want alice's session", op, ok)
	}
	if _, ok := get(a, a.cookieValue(unknown)); ok {
		t.Error("a signed cookie of a session the store does not hold was accepted")
	}
	later := a
	later.now = func() time.Time { return now.Add(SessionTTL) }
	if _, ok := get(later, a.cookieValue(id)); ok {
		t.Error("a session is still valid after SessionTTL")
	}
	if revoked, err := a.sessions.Revoke(ctx, session.Handle(id), now.Add(time.Minute)); err != nil || !revoked {
		t.Fatalf("Revoke = %v, %v", revoked, err)
	}
	if _, ok := get(a, a.cookieValue(id)); ok {
		t.Error("a revoked session is still valid")
	}
	if list, _ := a.sessions.List(ctx, now); len(list) != 0 {
		t.Errorf("List shows %+v after the revocation", list)
	}
}

func newID(t *testing.T) string {
	t.Helper()
	id, err := session.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// FuzzSessionCookie feeds the cookie parser what a browser may send:
// nothing but a cookie this console signed is ever accepted.
func FuzzSessionCookie(f *testing.F) {
	a := testAuth(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	for _, seed := range []string{a.cookieValue("abc"), a.cookieValue("c2Vzc2lvbi1pZA"), "", ".", "..", "a.b", "a.b.c", "YWxpY2U." + strings.Repeat("0", 64)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		id, ok := a.sessionID(v)
		if ok && a.cookieValue(id) != v {
			t.Fatalf("accepted %q as session %q, which this console did not sign", v, id)
		}
	})
}
