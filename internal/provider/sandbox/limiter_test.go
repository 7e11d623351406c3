package sandbox

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/pace"
)

func TestLimiter(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	l := newLimiter(pace.Rate{Count: 40, Per: time.Minute}, 3) // one per 1.5s, three at once
	for i := range 3 {
		if ok, _ := l.allow(start); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	ok, wait := l.allow(start)
	if ok || wait != 1500*time.Millisecond {
		t.Fatalf("4th request: %v wait %v; want refused for 1.5s", ok, wait)
	}
	if retryAfterSeconds(wait) != 2 {
		t.Fatalf("Retry-After %d, want 2 (rounded up)", retryAfterSeconds(wait))
	}
	// A refusal does not move the schedule: after the wait one more fits.
	if ok, _ := l.allow(start.Add(wait)); !ok {
		t.Fatal("request after the wait refused")
	}
	// Paced exactly at the rate, a caller is never refused.
	at := start.Add(time.Hour)
	for i := range 200 {
		if ok, _ := l.allow(at); !ok {
			t.Fatalf("paced request %d refused", i)
		}
		at = at.Add(1500 * time.Millisecond)
	}
	if retryAfterSeconds(time.Millisecond) != 1 || retryAfterSeconds(0) != 1 {
		t.Fatal("Retry-After must be at least 1")
	}
}
