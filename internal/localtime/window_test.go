package localtime

import (
	"testing"
	"time"
)

func mustWindow(t *testing.T, s string) Window {
	t.Helper()
	w, err := ParseWindow(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The next opening of a send window across the transitions: a start the
// clocks skip opens the gap's length later, a start they repeat opens at
// the first, and a window on the far side of a change opens at its new
// offset.
func TestNextOpening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone, window, at, want string
	}{
		// Inside the window: no hold.
		{"Europe/Berlin", "mon-fri 08:00-20:00", "2027-03-24T11:00:00Z", "2027-03-24T11:00:00Z"},
		// Berlin, the night the clocks skip 02:00-03:00: a window opening
		// at 02:30 opens at 03:30 CEST.
		{"Europe/Berlin", "daily 02:30-20:00", "2027-03-27T23:00:00Z", "2027-03-28T01:30:00Z"},
		// Friday 21:00 in Berlin, a weekday window: Monday 08:00.
		{"Europe/Berlin", "mon-fri 08:00-20:00", "2027-03-26T20:00:00Z", "2027-03-29T06:00:00Z"},
		// New York: Sunday 03:00 EDT, just after spring forward, to Monday
		// 08:00 EDT; Saturday 21:00 EDT, before fall back, to Sunday 08:00 EST.
		{"America/New_York", "mon-fri 08:00-20:00", "2027-03-14T07:00:00Z", "2027-03-15T12:00:00Z"},
		{"America/New_York", "daily 08:00-20:00", "2027-11-07T01:00:00Z", "2027-11-07T13:00:00Z"},
		// New York, a window opening at 01:30 on the fall-back night opens
		// at the first 01:30 (EDT).
		{"America/New_York", "daily 01:30-20:00", "2027-11-07T04:00:00Z", "2027-11-07T05:30:00Z"},
		// Lord Howe, the 30-minute shift: 01:00 (+10:30) to 09:00 (+11).
		{"Australia/Lord_Howe", "daily 09:00-17:00", "2027-10-02T14:30:00Z", "2027-10-02T22:00:00Z"},
		{"Australia/Lord_Howe", "daily 02:15-17:00", "2027-10-02T15:00:00Z", "2027-10-02T15:45:00Z"},
		// Moscow's last change, UTC+4 to UTC+3 on 26 October 2014: a 01:30
		// opening that night is the first 01:30 (UTC+4), the next day's at UTC+3.
		{"Europe/Moscow", "daily 01:30-20:00", "2014-10-25T21:00:00Z", "2014-10-25T21:30:00Z"},
		{"Europe/Moscow", "daily 01:30-20:00", "2014-10-26T17:00:00Z", "2014-10-26T22:30:00Z"},
		// Across midnight: a night window 22:00-06:00 is open at 23:00 and
		// at 05:00, closed at 07:00 until 22:00.
		{"UTC", "daily 22:00-06:00", "2027-01-05T23:00:00Z", "2027-01-05T23:00:00Z"},
		{"UTC", "daily 22:00-06:00", "2027-01-06T05:00:00Z", "2027-01-06T05:00:00Z"},
		{"UTC", "daily 22:00-06:00", "2027-01-06T07:00:00Z", "2027-01-06T22:00:00Z"},
		{"UTC", "fri 22:00-06:00", "2027-01-09T05:00:00Z", "2027-01-09T05:00:00Z"},
	} {
		loc := mustZone(t, tc.zone)
		at, _ := time.Parse(time.RFC3339, tc.at)
		got := NextOpening(at, loc, []Window{mustWindow(t, tc.window)})
		if s := got.UTC().Format(time.RFC3339); s != tc.want {
			t.Errorf("%s, %s, at %s: opens %s, want %s", tc.zone, tc.window, tc.at, s, tc.want)
		}
	}
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"mon-fri 08:00-20:00":  "mon,tue,wed,thu,fri 08:00-20:00",
		"sat,sun 10:00-18:00":  "sun,sat 10:00-18:00",
		"fri-mon 09:00-24:00":  "sun,mon,fri,sat 09:00-24:00",
		"daily 22:00-06:00":    "sun,mon,tue,wed,thu,fri,sat 22:00-06:00",
		"Mon-Fri 08:00-20:00 ": "mon,tue,wed,thu,fri 08:00-20:00",
	} {
		w, err := ParseWindow(in)
		if err != nil || w.String() != want {
			t.Errorf("ParseWindow(%q) = %q, %v; want %q", in, w.String(), err, want)
		}
	}
	for _, bad := range []string{"", "weekdays 08:00-20:00", "mon-fri", "mon-fri 8-20", "mon 08:00-08:00",
		"mon 24:00-08:00", "mon-fry 08:00-20:00"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("ParseWindow(%q) accepted", bad)
		}
	}
}
