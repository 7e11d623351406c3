package localtime

import (
	"fmt"
	"strings"
	"time"
)

// Window is a send window on the recipient's wall clock: on the days it
// names, a notification may be sent from Start up to End (minutes since
// local midnight). End at or before Start is a window across midnight: it
// opens on a day it names and closes on the next day. Quiet hours are the
// time outside every window.
type Window struct {
	Days       [7]bool // indexed by time.Weekday
	Start, End int     // minutes since midnight, 0..1439
}

// ParseWindow reads "mon-fri 08:00-20:00", "sat,sun 10:00-18:00" or
// "daily 07:00-22:00". The message of an error says what is accepted.
func ParseWindow(s string) (Window, error) {
	var w Window
	days, hours, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return w, fmt.Errorf("%q is not a window; accepted: days and hours like \"mon-fri 08:00-20:00\", "+
			"\"sat,sun 10:00-18:00\" or \"daily 07:00-22:00\"", s)
	}
	if err := parseDays(&w, strings.ToLower(days)); err != nil {
		return w, fmt.Errorf("%q: %v", s, err)
	}
	from, to, ok := strings.Cut(strings.TrimSpace(hours), "-")
	var err error
	if !ok {
		return w, fmt.Errorf("%q: the hours %q are not a range like 08:00-20:00", s, hours)
	}
	if w.Start, err = parseClock(from); err == nil && w.Start == 24*60 {
		err = fmt.Errorf("a window cannot open at 24:00; write 00:00")
	}
	if err == nil {
		w.End, err = parseClock(to)
	}
	if err != nil {
		return w, fmt.Errorf("%q: %v", s, err)
	}
	if w.Start == w.End {
		return w, fmt.Errorf("%q: the window opens and closes at the same minute; for all day use 00:00-24:00", s)
	}
	return w, nil
}

var dayNames = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

func parseDays(w *Window, s string) error {
	if s == "daily" {
		w.Days = [7]bool{true, true, true, true, true, true, true}
		return nil
	}
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, okA := dayNames[from]
		b, okB := a, true
		if isRange {
			b, okB = dayNames[to]
		}
		if !okA || !okB {
			return fmt.Errorf("%q is not a day or a range of days (sun, mon, tue, wed, thu, fri, sat, mon-fri, daily)", part)
		}
		for d := a; ; d = (d + 1) % 7 {
			w.Days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func parseClock(s string) (int, error) {
	if s == "24:00" {
		return 24 * 60, nil
	}
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day like 08:00 (or 24:00 for the end of the day)", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// String writes w as ParseWindow reads it.
func (w Window) String() string {
	var days []string
	for d := time.Sunday; d <= time.Saturday; d++ {
		if w.Days[d] {
			days = append(days, strings.ToLower(d.String()[:3]))
		}
	}
	clock := func(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }
	return strings.Join(days, ",") + " " + clock(w.Start) + "-" + clock(w.End)
}

// open reports whether the wall-clock time c (ParseCivil's form) is inside w.
func (w Window) open(c time.Time) bool {
	m := c.Hour()*60 + c.Minute()
	d := c.Weekday()
	if w.Start < w.End {
		return w.Days[d] && m >= w.Start && m < w.End
	}
	return (w.Days[d] && m >= w.Start) || (w.Days[(d+6)%7] && m < w.End)
}

// NextOpening returns t when, on loc's wall clock, t is inside one of the
// windows (or there are none), and otherwise the first instant after t at
// which one opens: the window's start on the next day it names, resolved
// by the compatible rule, so a start the clocks skip opens the gap's length
// later. A week always holds an opening of any window, so the search ends.
func NextOpening(t time.Time, loc *time.Location, windows []Window) time.Time {
	if len(windows) == 0 {
		return t
	}
	c := Civil(t, loc)
	for _, w := range windows {
		if w.open(c) {
			return t
		}
	}
	var best time.Time
	day := time.Date(c.Year(), c.Month(), c.Day(), 0, 0, 0, 0, time.UTC)
	for k := 0; k <= 8; k++ {
		d := day.AddDate(0, 0, k)
		for _, w := range windows {
			if !w.Days[d.Weekday()] {
				continue
			}
			at, _ := Resolve(d.Add(time.Duration(w.Start)*time.Minute), loc, Compatible)
			if at.After(t) && (best.IsZero() || at.Before(best)) {
				best = at
			}
		}
		if !best.IsZero() {
			return best
		}
	}
	return t
}
