package localtime

import (
	"errors"
	"testing"
	"time"
)

// fuzzZones are zones with unusual transitions: half-hour and 45-minute
// offsets and shifts, southern-hemisphere DST, date-line crossings,
// permanent offset changes and DST that was abolished.
var fuzzZones = []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Europe/Moscow",
	"Pacific/Apia", "Pacific/Kiritimati", "Asia/Kathmandu", "Pacific/Chatham", "America/Santiago",
	"Africa/Casablanca", "Asia/Tehran", "America/St_Johns", "Antarctica/Troll", "Europe/Dublin",
	"America/Sao_Paulo", "Asia/Pyongyang", "Pacific/Kwajalein", "Asia/Kolkata", "America/Caracas", "UTC"}

// FuzzResolve checks the disambiguation rule over any zone and local time:
// earlier is never after later; reject refuses exactly when they differ;
// a time the zone shows once or twice resolves to an instant that shows it;
// a skipped time resolves, compatibly, to the later candidate, which shows
// the local time moved forward by the gap. The seeds (f.Add and
// testdata/fuzz/FuzzResolve) run as tests under go test.
func FuzzResolve(f *testing.F) {
	for _, s := range []struct {
		zone string
		unix int64
	}{
		{"America/New_York", time.Date(2027, 3, 14, 2, 30, 0, 0, time.UTC).Unix()},
		{"America/New_York", time.Date(2027, 11, 7, 1, 30, 0, 0, time.UTC).Unix()},
		{"Europe/Berlin", time.Date(2027, 3, 28, 2, 30, 0, 0, time.UTC).Unix()},
		{"Europe/Berlin", time.Date(2027, 10, 31, 2, 30, 0, 0, time.UTC).Unix()},
		{"Australia/Lord_Howe", time.Date(2027, 10, 3, 2, 15, 0, 0, time.UTC).Unix()},
		{"Australia/Lord_Howe", time.Date(2027, 4, 4, 1, 45, 0, 0, time.UTC).Unix()},
		{"Europe/Moscow", time.Date(2014, 10, 26, 1, 30, 0, 0, time.UTC).Unix()},
		{"Pacific/Apia", time.Date(2011, 12, 30, 12, 0, 0, 0, time.UTC).Unix()},
		{"UTC", time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC).Unix()},
		{"Pacific/Kiritimati", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()},
	} {
		f.Add(s.zone, uint8(0), s.unix)
	}
	f.Fuzz(func(t *testing.T, zone string, pick uint8, unix int64) {
		// A name the mutator made up is rarely a zone: pick one of
		// fuzzZones then, so every input tests a real zone.
		loc, err := LoadZone(zone)
		if err != nil {
			zone = fuzzZones[int(pick)%len(fuzzZones)]
			loc = mustZone(t, zone)
		}
		// Keep the wall time in the years 1 to 9999, as the API does.
		lo, hi := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
		if unix < lo || unix > hi {
			return
		}
		wall := time.Unix(unix, 0).UTC()
		compatible, err := Resolve(wall, loc, Compatible)
		if err != nil {
			t.Fatal(err)
		}
		earlier, _ := Resolve(wall, loc, Earlier)
		later, _ := Resolve(wall, loc, Later)
		if earlier.After(later) {
			t.Fatalf("%s in %s: earlier %s is after later %s", wall, zone, earlier, later)
		}
		rejected, err := Resolve(wall, loc, Reject)
		var amb *AmbiguityError
		switch {
		case earlier.Equal(later) && (err != nil || !rejected.Equal(earlier)):
			t.Fatalf("%s in %s: reject = %s, %v; want %s", wall, zone, rejected, err, earlier)
		case !earlier.Equal(later) && !errors.As(err, &amb):
			t.Fatalf("%s in %s: reject = %v; want an AmbiguityError", wall, zone, err)
		}
		shows := func(at time.Time) bool { return Civil(at, loc).Equal(wall) }
		switch {
		case shows(earlier) && shows(later):
			// Once or twice: compatible takes the first.
			if !compatible.Equal(earlier) {
				t.Fatalf("%s in %s: compatible %s, want the earlier %s", wall, zone, compatible, earlier)
			}
		case shows(earlier) || shows(later):
			t.Fatalf("%s in %s: only one of %s and %s shows the time", wall, zone, earlier, later)
		default:
			gap := later.Sub(earlier)
			if !compatible.Equal(later) || !Civil(compatible, loc).Equal(wall.Add(gap)) {
				t.Fatalf("%s in %s: compatible %s (local %s), want %s moved forward by the gap %s",
					wall, zone, compatible, Civil(compatible, loc), wall, gap)
			}
		}
	})
}
