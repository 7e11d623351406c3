package console

import (
	"strings"
	"testing"
	"time"
)

func testAuth(now time.Time) auth {
	return newAuth("auth-test-token-0123456789", "", func() time.Time { return now })
}

func TestSessionRoundTripsAndExpires(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := testAuth(now)
	v := a.newSession("alice")
	if name, ok := a.session(v); !ok || name != "alice" {
		t.Fatalf("session(%q) = %q, %v; want alice", v, name, ok)
	}
	later := testAuth(now.Add(SessionTTL))
	if _, ok := later.session(v); ok {
		t.Error("a session is still valid after SessionTTL")
	}
	other := newAuth("another-token-0123456789", "", func() time.Time { return now })
	if _, ok := other.session(v); ok {
		t.Error("a session survives a new token")
	}
	parts := strings.Split(v, ".")
	for _, forged := range []string{parts[0] + "." + "99999999999" + "." + parts[2], "Ym9i." + parts[1] + "." + parts[2], v + "x", ""} {
		if _, ok := a.session(forged); ok {
			t.Errorf("forged session %q accepted", forged)
		}
	}
}

// FuzzSession feeds the cookie parser what a browser may send: nothing but
// a session this console signed is ever accepted, and the name it yields is
// the one signed.
func FuzzSession(f *testing.F) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := testAuth(now)
	for _, seed := range []string{a.newSession("alice"), a.newSession("ops team"), "", ".", "..", "a.b.c", "YWxpY2U.1.00", "YWxpY2U.9999999999." + strings.Repeat("0", 64)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		name, ok := a.session(v)
		if !ok {
			return
		}
		if !validName(name) || a.newSessionAt(name, v) != v {
			t.Fatalf("accepted %q as %q, which this console did not sign", v, name)
		}
	})
}

// newSessionAt re-signs name with the expiry v carries, to compare.
func (a auth) newSessionAt(name, v string) string {
	parts := strings.Split(v, ".")
	return parts[0] + "." + parts[1] + "." + a.mac("session", name, parts[1])
}
