package providertest

import (
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/provider"
)

// TestDocTableRoundTrip: what DocTable renders parses back to the rows'
// cells, and any drift (a changed class, a missing row) no longer matches.
func TestDocTableRoundTrip(t *testing.T) {
	t.Parallel()
	rows := []Row{
		{Status: 401, Code: "20003", Meaning: "authenticate", Class: provider.Account},
		{Status: 400, Code: "21610", Meaning: "STOP", Class: provider.Permanent, Recipient: true},
		{Status: 0, Meaning: "no answer", Class: provider.Transient, MaybeSent: true},
	}
	want := [][]string{docHeader}
	for _, r := range rows {
		want = append(want, r.cells())
	}
	doc := "# Providers\n\n<!-- failure-table:x -->\n\n" + DocTable(rows) + "\nThe next paragraph | with a bar.\n"
	got, err := ParseDocTable(doc, "x")
	if err != nil || !equalTables(got, want) {
		t.Fatalf("%v: %q; want %q", err, got, want)
	}
	if !strings.Contains(doc, "| `21610` | STOP | permanent | yes | fail the row with the code, no page |") {
		t.Fatalf("rendered %s", doc)
	}
	drifted := strings.Replace(doc, "| permanent | yes |", "| permanent | no |", 1)
	if got, _ := ParseDocTable(drifted, "x"); equalTables(got, want) {
		t.Fatal("a changed recipient flag still matches")
	}
	short := strings.Replace(doc, "| none | — | no answer | transient | no | retry, flagged a possible duplicate |\n", "", 1)
	if got, _ := ParseDocTable(short, "x"); equalTables(got, want) {
		t.Fatal("a missing row still matches")
	}
	if _, err := ParseDocTable(doc, "y"); err == nil {
		t.Fatal("a missing marker parsed")
	}
}
