// Package localtime owns wall-clock time in a recipient's IANA time zone:
// parsing a local date and time without an offset ("2027-03-28T02:30"),
// loading a zone by name, and resolving a local time to the one instant the
// ledger stores, by a documented rule where daylight saving time skips or
// repeats the local time (docs/api.md, "Local time").
//
// Zones come from the host's tz database when it has one and from Go's
// embedded copy (time/tzdata) otherwise, so a container image without
// /usr/share/zoneinfo resolves the same names. The package never reads the
// process's own zone ("Local"): a time owed sends depends on the recipient,
// never on where the sweeper runs.
package localtime

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata"
)

// MaxZoneLen bounds a zone name in bytes. The longest IANA name,
// America/Argentina/ComodRivadavia, is 32; 64 leaves room without letting a
// name grow into a payload.
const MaxZoneLen = 64

// Layout is how the ledger writes a local time: seconds always, a fraction
// only when there is one.
const Layout = "2006-01-02T15:04:05.999999"

// The local-time layouts the API accepts, minutes first: a person writes
// 09:00, a program 09:00:00.
var layouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02T15:04:05.999999999"}

// Accepted describes the accepted form of a local time in error messages.
const Accepted = "a local date and time without an offset, like 2027-03-28T09:00 or 2027-03-28T09:00:00"

// ParseCivil reads a local date and time without an offset. The result
// carries the wall-clock fields in UTC, which is only a container: it is not
// an instant until Resolve gives it a zone.
func ParseCivil(s string) (time.Time, error) {
	for _, l := range layouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.Truncate(time.Microsecond), nil
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return time.Time{}, fmt.Errorf("%q carries an offset; a local time has none (the zone gives it): "+
			"drop the offset, or send the instant as due_at", s)
	}
	return time.Time{}, fmt.Errorf("%q is not %s", s, Accepted)
}

// FormatCivil writes a wall-clock time (ParseCivil's result) in Layout.
func FormatCivil(t time.Time) string { return t.Format(Layout) }

// LoadZone loads an IANA zone by name. "Local" and the empty name are
// refused: they mean the host's zone, which says nothing about a recipient.
func LoadZone(name string) (*time.Location, error) {
	switch {
	case name == "":
		return nil, errors.New("required: an IANA time zone name like Europe/Berlin")
	case len(name) > MaxZoneLen:
		return nil, fmt.Errorf("%d bytes exceeds the limit of %d", len(name), MaxZoneLen)
	case name == "Local" || strings.ContainsAny(name, "\x00\\") || strings.HasPrefix(name, "/") ||
		strings.Contains(name, ".."):
		return nil, fmt.Errorf("%q is not an IANA time zone name (like Europe/Berlin or America/New_York)", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a time zone of the IANA tz database (like Europe/Berlin or "+
			"America/New_York; names are case-sensitive)", name)
	}
	return loc, nil
}

// Disambiguation says which instant a local time stands for where the
// zone's clocks skip it (a gap: spring forward) or show it twice (an
// overlap: fall back). The names and the default are RFC 9557's and
// Temporal's.
type Disambiguation string

const (
	// Compatible moves a skipped time forward by the length of the gap and
	// takes the earlier of two repeated instants: what a calendar does with
	// "02:30" on the night the clocks go from 02:00 to 03:00. The default.
	Compatible Disambiguation = "compatible"
	// Earlier takes the earlier instant: a skipped time moves back by the
	// gap, a repeated one is its first occurrence.
	Earlier Disambiguation = "earlier"
	// Later takes the later instant: a skipped time moves forward by the
	// gap, a repeated one is its second occurrence.
	Later Disambiguation = "later"
	// Reject refuses a skipped or repeated time (a *AmbiguityError).
	Reject Disambiguation = "reject"
)

// Disambiguations lists the accepted values, for error messages.
const Disambiguations = "compatible (the default), earlier, later, reject"

// ParseDisambiguation reads a disambiguation; the empty string is Compatible.
func ParseDisambiguation(s string) (Disambiguation, error) {
	switch d := Disambiguation(s); d {
	case "":
		return Compatible, nil
	case Compatible, Earlier, Later, Reject:
		return d, nil
	}
	return "", fmt.Errorf("%q is not a disambiguation; accepted: %s", s, Disambiguations)
}

// AmbiguityError is Reject's refusal: the local time falls in a gap or an
// overlap of the zone.
type AmbiguityError struct {
	Local time.Time // the wall-clock time asked for
	Zone  string
	// Gap is true for a skipped time, false for a repeated one.
	Gap bool
	// Before and After are the zone's offsets either side of the change.
	Before, After time.Duration
	// Earlier and Later are the instants the other disambiguations give.
	Earlier, Later time.Time
}

func (e *AmbiguityError) Error() string {
	what := "is repeated in %s (the clocks go back from UTC%s to UTC%s), so it names two instants, %s and %s"
	if e.Gap {
		what = "does not exist in %s (the clocks skip from UTC%s to UTC%s); the nearest instants are %s and %s"
	}
	return fmt.Sprintf("%s "+what+"; send disambiguation compatible, earlier or later to choose, or a time "+
		"outside the change", FormatCivil(e.Local), e.Zone, offset(e.Before), offset(e.After),
		e.Earlier.UTC().Format(time.RFC3339), e.Later.UTC().Format(time.RFC3339))
}

func offset(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%02d:%02d", sign, int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// Resolve returns the instant the wall-clock time civil (ParseCivil's
// result) stands for in loc, choosing by d where the zone's clocks skip or
// repeat it.
//
// Go's time.Date leaves that choice unspecified, so Resolve makes it
// itself, as Temporal does: the zone's offsets a day either side of the
// local time are the only candidates (no zone changes its offset twice in
// two days), and a candidate offset holds when the instant it gives is
// really at that offset. None holds in a gap, both in an overlap.
func Resolve(civil time.Time, loc *time.Location, d Disambiguation) (time.Time, error) {
	wall := time.Date(civil.Year(), civil.Month(), civil.Day(), civil.Hour(), civil.Minute(), civil.Second(),
		civil.Nanosecond(), time.UTC)
	before := offsetAt(wall.Add(-24*time.Hour), loc)
	after := offsetAt(wall.Add(24*time.Hour), loc)
	var fits []time.Time
	for _, o := range []time.Duration{before, after} {
		t := wall.Add(-o)
		if offsetAt(t, loc) == o && (len(fits) == 0 || !fits[0].Equal(t)) {
			fits = append(fits, t)
		}
	}
	if len(fits) == 0 && before == after {
		// The offset changed and changed back within the two days: take the
		// offset at the wall time itself, which fits in every real zone.
		o := offsetAt(wall.Add(-before), loc)
		fits = append(fits, wall.Add(-o))
	}
	switch len(fits) {
	case 1:
		return fits[0].In(loc), nil
	case 2:
		earlier, later := fits[0], fits[1]
		if later.Before(earlier) {
			earlier, later = later, earlier
		}
		switch d {
		case Reject:
			return time.Time{}, &AmbiguityError{Local: wall, Zone: loc.String(), Before: before, After: after,
				Earlier: earlier, Later: later}
		case Later:
			return later.In(loc), nil
		}
		return earlier.In(loc), nil
	}
	// A gap: reading the wall time at the offset before the change gives
	// the instant the gap's length later; at the offset after, as long
	// earlier.
	forward, back := wall.Add(-before), wall.Add(-after)
	switch d {
	case Reject:
		return time.Time{}, &AmbiguityError{Local: wall, Zone: loc.String(), Gap: true, Before: before, After: after,
			Earlier: back, Later: forward}
	case Earlier:
		return back.In(loc), nil
	}
	return forward.In(loc), nil
}

// offsetAt is loc's offset from UTC at instant t.
func offsetAt(t time.Time, loc *time.Location) time.Duration {
	_, s := t.In(loc).Zone()
	return time.Duration(s) * time.Second
}

// Civil returns the wall-clock time of instant t in loc, as ParseCivil
// would read it.
func Civil(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}
