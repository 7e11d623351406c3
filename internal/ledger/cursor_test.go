package ledger

import (
	"testing"
	"time"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, p := range []Position{
		{DueAt: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC), ID: 1},
		{DueAt: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), ID: 1<<63 - 1},
		{DueAt: time.Date(1900, 1, 1, 0, 0, 0, 1000, time.UTC), ID: 42},
	} {
		got, err := ParseCursor(p.Cursor())
		if err != nil || !got.DueAt.Equal(p.DueAt) || got.ID != p.ID {
			t.Errorf("%v: decoded %v, %v", p, got, err)
		}
	}
}

// FuzzCursor: the parser of an untrusted query value never panics, and
// what it accepts is exactly what Cursor makes.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "abc", "djEuMS4x", "djEuMC4x", "djEuLTEuMQ", "djEuMDEuMQ", "djIuMS4x",
		"djEuLTkyMjMzNzIwMzY4NTQ3NzU4MDguMQ", "djEuOTIyMzM3MjAzNjg1NDc3NTgwNy4x",
		Position{DueAt: time.Unix(1772366400, 0), ID: 7}.Cursor()} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseCursor(s)
		if err != nil {
			return
		}
		if p.ID < 1 || (p).Cursor() != s || !InRange(p.DueAt) {
			t.Fatalf("%q accepted as %+v, which encodes to %q", s, p, (p).Cursor())
		}
	})
}
