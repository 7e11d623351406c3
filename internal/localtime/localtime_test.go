package localtime

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustCivil(t testing.TB, s string) time.Time {
	t.Helper()
	c, err := ParseCivil(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The transitions of four zones: a one-hour shift in each hemisphere's
// convention (America/New_York at 02:00 local, Europe/Berlin at 01:00 UTC),
// Lord Howe Island's half-hour shift, and two historical changes: Moscow's
// permanent move from UTC+4 to UTC+3 in 2014 (a repeated hour with no DST)
// and Samoa skipping 30 December 2011 (a whole day's gap).
func TestResolveTransitions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone, local                string
		compatible, earlier, later string // UTC instants; reject refuses when earlier != later
	}{
		// America/New_York, 2027: 02:00 EST becomes 03:00 EDT on 14 March,
		// 02:00 EDT becomes 01:00 EST on 7 November.
		{"America/New_York", "2027-03-14T01:59", "2027-03-14T06:59:00Z", "2027-03-14T06:59:00Z", "2027-03-14T06:59:00Z"},
		{"America/New_York", "2027-03-14T02:00", "2027-03-14T07:00:00Z", "2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z"},
		{"America/New_York", "2027-03-14T02:30", "2027-03-14T07:30:00Z", "2027-03-14T06:30:00Z", "2027-03-14T07:30:00Z"},
		{"America/New_York", "2027-03-14T03:00", "2027-03-14T07:00:00Z", "2027-03-14T07:00:00Z", "2027-03-14T07:00:00Z"},
		{"America/New_York", "2027-11-07T00:59", "2027-11-07T04:59:00Z", "2027-11-07T04:59:00Z", "2027-11-07T04:59:00Z"},
		{"America/New_York", "2027-11-07T01:00", "2027-11-07T05:00:00Z", "2027-11-07T05:00:00Z", "2027-11-07T06:00:00Z"},
		{"America/New_York", "2027-11-07T01:30", "2027-11-07T05:30:00Z", "2027-11-07T05:30:00Z", "2027-11-07T06:30:00Z"},
		{"America/New_York", "2027-11-07T02:00", "2027-11-07T07:00:00Z", "2027-11-07T07:00:00Z", "2027-11-07T07:00:00Z"},
		// Europe/Berlin, 2027: 02:00 CET becomes 03:00 CEST on 28 March,
		// 03:00 CEST becomes 02:00 CET on 31 October.
		{"Europe/Berlin", "2027-03-28T02:30", "2027-03-28T01:30:00Z", "2027-03-28T00:30:00Z", "2027-03-28T01:30:00Z"},
		{"Europe/Berlin", "2027-03-28T09:00", "2027-03-28T07:00:00Z", "2027-03-28T07:00:00Z", "2027-03-28T07:00:00Z"},
		{"Europe/Berlin", "2027-03-27T09:00", "2027-03-27T08:00:00Z", "2027-03-27T08:00:00Z", "2027-03-27T08:00:00Z"},
		{"Europe/Berlin", "2027-10-31T02:30", "2027-10-31T00:30:00Z", "2027-10-31T00:30:00Z", "2027-10-31T01:30:00Z"},
		{"Europe/Berlin", "2027-10-31T03:00", "2027-10-31T02:00:00Z", "2027-10-31T02:00:00Z", "2027-10-31T02:00:00Z"},
		// Australia/Lord_Howe, 2027: 02:00 (+10:30) becomes 02:30 (+11) on
		// 3 October; 02:00 (+11) becomes 01:30 (+10:30) on 4 April.
		{"Australia/Lord_Howe", "2027-10-03T02:15", "2027-10-02T15:45:00Z", "2027-10-02T15:15:00Z", "2027-10-02T15:45:00Z"},
		{"Australia/Lord_Howe", "2027-10-03T02:30", "2027-10-02T15:30:00Z", "2027-10-02T15:30:00Z", "2027-10-02T15:30:00Z"},
		{"Australia/Lord_Howe", "2027-04-04T01:45", "2027-04-03T14:45:00Z", "2027-04-03T14:45:00Z", "2027-04-03T15:15:00Z"},
		{"Australia/Lord_Howe", "2027-04-04T01:29", "2027-04-03T14:29:00Z", "2027-04-03T14:29:00Z", "2027-04-03T14:29:00Z"},
		// Europe/Moscow left UTC+4 for UTC+3 at 02:00 on 26 October 2014.
		{"Europe/Moscow", "2014-10-26T01:30", "2014-10-25T21:30:00Z", "2014-10-25T21:30:00Z", "2014-10-25T22:30:00Z"},
		{"Europe/Moscow", "2015-10-26T01:30", "2015-10-25T22:30:00Z", "2015-10-25T22:30:00Z", "2015-10-25T22:30:00Z"},
		// Pacific/Apia crossed the date line: 29 December 2011 (UTC-10) was
		// followed by 31 December (UTC+14).
		{"Pacific/Apia", "2011-12-30T12:00", "2011-12-30T22:00:00Z", "2011-12-29T22:00:00Z", "2011-12-30T22:00:00Z"},
		{"Pacific/Apia", "2011-12-31T12:00", "2011-12-30T22:00:00Z", "2011-12-30T22:00:00Z", "2011-12-30T22:00:00Z"},
	} {
		t.Run(tc.zone+"/"+tc.local, func(t *testing.T) {
			loc, civil := mustZone(t, tc.zone), mustCivil(t, tc.local)
			for d, want := range map[Disambiguation]string{Compatible: tc.compatible, Earlier: tc.earlier, Later: tc.later} {
				got, err := Resolve(civil, loc, d)
				if err != nil {
					t.Fatalf("%s: %v", d, err)
				}
				if s := got.UTC().Format(time.RFC3339); s != want {
					t.Errorf("%s: %s in %s = %s, want %s", d, tc.local, tc.zone, s, want)
				}
			}
			_, err := Resolve(civil, loc, Reject)
			var amb *AmbiguityError
			if ambiguous := tc.earlier != tc.later; ambiguous != errors.As(err, &amb) {
				t.Fatalf("reject: err = %v, want an AmbiguityError: %v", err, ambiguous)
			}
			if amb != nil && !strings.Contains(amb.Error(), tc.zone) {
				t.Errorf("reject: %q does not name the zone", amb.Error())
			}
		})
	}
}

func TestParseCivil(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"2027-03-28T09:00":            "2027-03-28T09:00:00",
		"2027-03-28T09:00:05":         "2027-03-28T09:00:05",
		"2027-03-28T09:00:05.1234567": "2027-03-28T09:00:05.123456",
	} {
		got, err := ParseCivil(in)
		if err != nil || FormatCivil(got) != want {
			t.Errorf("ParseCivil(%q) = %s, %v; want %s", in, FormatCivil(got), err, want)
		}
	}
	for in, says := range map[string]string{
		"2027-03-28T09:00:00Z":      "carries an offset",
		"2027-03-28T09:00:00+01:00": "carries an offset",
		"2027-03-28":                "not a local date and time",
		"2027-02-30T09:00":          "not a local date and time",
		"28.03.2027 09:00":          "not a local date and time",
	} {
		if _, err := ParseCivil(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseCivil(%q) = %v, want an error saying %q", in, err, says)
		}
	}
}

func TestLoadZone(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "Local", "europe/berlin", "Europe/Nowhere", "../etc/passwd", "/etc/localtime",
		strings.Repeat("A", MaxZoneLen+1)} {
		if _, err := LoadZone(bad); err == nil {
			t.Errorf("LoadZone(%q) accepted", bad)
		}
	}
	for _, good := range []string{"UTC", "Europe/Berlin", "America/Argentina/ComodRivadavia", "Etc/GMT+5"} {
		if _, err := LoadZone(good); err != nil {
			t.Errorf("LoadZone(%q): %v", good, err)
		}
	}
}

func TestParseDisambiguation(t *testing.T) {
	t.Parallel()
	if d, err := ParseDisambiguation(""); d != Compatible || err != nil {
		t.Errorf(`ParseDisambiguation("") = %q, %v`, d, err)
	}
	if _, err := ParseDisambiguation("first"); err == nil || !strings.Contains(err.Error(), Disambiguations) {
		t.Errorf(`ParseDisambiguation("first") = %v, want the accepted values`, err)
	}
}
