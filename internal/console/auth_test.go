package console

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func testAuth(now time.Time) auth {
	clk := func() time.Time { return now }
	return newAuth("auth-test-token-0123456789", "", clk, NewMemorySessions(), newThrottle(clk, nil))
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
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := testAuth(now)
	ctx := context.Background()
	s := Session{ID: newSessionID(), Operator: "alice", Source: "192.0.2.1", Created: now, Expires: now.Add(SessionTTL)}
	if err := a.sessions.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	get := func(a auth, v string) (operator, bool) {
		r := httptest.NewRequest("GET", "/console/", nil)
		r.Header.Set("Cookie", CookieName+"="+v)
		op, ok, _ := a.identify(r)
		return op, ok
	}
	if op, ok := get(a, a.cookieValue(s.ID)); !ok || op.Name != "alice" || op.Session != s.ID {
		t.Fatalf("identify = %+v, %v; want alice's session", op, ok)
	}
	if _, ok := get(a, a.cookieValue(newSessionID())); ok {
		t.Error("a signed cookie of a session the store does not hold was accepted")
	}
	later := a
	later.now = func() time.Time { return now.Add(SessionTTL) }
	if _, ok := get(later, a.cookieValue(s.ID)); ok {
		t.Error("a session is still valid after SessionTTL")
	}
	if revoked, err := a.sessions.Revoke(ctx, s.ID, now.Add(time.Minute)); err != nil || !revoked {
		t.Fatalf("Revoke = %v, %v", revoked, err)
	}
	if _, ok := get(a, a.cookieValue(s.ID)); ok {
		t.Error("a revoked session is still valid")
	}
	if list, _ := a.sessions.List(ctx, now); len(list) != 0 {
		t.Errorf("List shows %+v after the revocation", list)
	}
}

// MemorySessions forgets ended sessions, then the oldest, at MaxSessions.
func TestMemorySessionsAreBounded(t *testing.T) {
	m := NewMemorySessions()
	ctx := context.Background()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range MaxSessions + 5 {
		at := start.Add(time.Duration(i) * time.Second)
		if err := m.Create(ctx, Session{ID: fmt.Sprint("s", i), Operator: "alice", Created: at, Expires: at.Add(SessionTTL)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.byID); n != MaxSessions {
		t.Errorf("%d sessions held, want %d", n, MaxSessions)
	}
	if _, ok, _ := m.Get(ctx, "s0"); ok {
		t.Error("the oldest session was kept past the bound")
	}
	if _, ok, _ := m.Get(ctx, fmt.Sprint("s", MaxSessions+4)); !ok {
		t.Error("the newest session was dropped")
	}
}

// FuzzSessionCookie feeds the cookie parser what a browser may send:
// nothing but a cookie this console signed is ever accepted.
func FuzzSessionCookie(f *testing.F) {
	a := testAuth(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	for _, seed := range []string{a.cookieValue("abc"), a.cookieValue(newSessionID()), "", ".", "..", "a.b", "a.b.c", "YWxpY2U." + strings.Repeat("0", 64)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		id, ok := a.sessionID(v)
		if ok && a.cookieValue(id) != v {
			t.Fatalf("accepted %q as session %q, which this console did not sign", v, id)
		}
	})
}
