package queue

import (
	"net/http"
	"testing"
	"time"
)

var retryAfterNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{" 3 ", 3 * time.Second, true},
		{"120", 2 * time.Minute, true},
		{"99999999999999999999999", maxRetryAfter, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{retryAfterNow.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{retryAfterNow.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{retryAfterNow.Add(48 * time.Hour).Format(http.TimeFormat), maxRetryAfter, true},
		{"Sunday, 01-Mar-26 12:00:30 GMT", 30 * time.Second, true}, // RFC 850, still accepted by HTTP/1.1
	} {
		got, ok := parseRetryAfter(tc.in, retryAfterNow)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseRetryAfter checks that no header value panics or yields a wait
// outside 0..maxRetryAfter. The f.Add seeds run as a regular test.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "5", "18446744073709551616", "Sun, 01 Mar 2026 12:00:30 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "-3", "3a", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseRetryAfter(s, retryAfterNow)
		if d < 0 || d > maxRetryAfter || (!ok && d != 0) {
			t.Fatalf("parseRetryAfter(%q) = %s, %v", s, d, ok)
		}
	})
}
