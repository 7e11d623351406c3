package providertest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/provider"
)

// Action is what the worker does with a failure of this class and these
// flags: the table's "owed does" column.
func Action(class provider.Class, recipient, maybeSent bool) string {
	switch {
	case class == provider.Account:
		return "pause the account, no attempt, page"
	case class == provider.RateLimited && recipient:
		return "wait, slow that recipient only, no attempt"
	case class == provider.RateLimited:
		return "wait, slow the account, no attempt"
	case class == provider.Permanent && recipient:
		return "fail the row with the code, no page"
	case class == provider.Permanent:
		return "fail the row, dead-letter"
	case maybeSent:
		return "retry, flagged a possible duplicate"
	}
	return "retry with backoff"
}

// docHeader is the header of every failure table in docs/providers.md.
var docHeader = []string{"HTTP", "code", "meaning", "class", "recipient", "owed does"}

func (r Row) cells() []string {
	status, code, recipient := strconv.Itoa(r.Status), r.Code, "no"
	if r.Status == 0 {
		status = "none"
	}
	if code == "" {
		code = "—"
	}
	if r.Recipient {
		recipient = "yes"
	}
	return []string{status, code, r.Meaning, r.Class.String(), recipient, Action(r.Class, r.Recipient, r.MaybeSent)}
}

// DocTable renders rows as the markdown table docs/providers.md carries
// after the line "<!-- failure-table:<name> -->".
func DocTable(rows []Row) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	line(docHeader)
	sep := make([]string, len(docHeader))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range rows {
		cells := r.cells()
		if cells[1] != "—" {
			cells[1] = "`" + cells[1] + "`"
		}
		line(cells)
	}
	return b.String()
}

// DocPath is the providers document, found from the test's directory.
const DocPath = "docs/providers.md"

// CheckDocTable fails the test unless docs/providers.md carries, right after
// the line "<!-- failure-table:<name> -->", a table whose rows say what rows
// say (backquotes and spacing aside), in order. The failure prints the table
// to paste, so the document is generated from the table the tests run.
func CheckDocTable(t *testing.T, name string, rows []Row) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), DocPath))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseDocTable(string(doc), name)
	want := make([][]string, 0, len(rows)+1)
	want = append(want, docHeader)
	for _, r := range rows {
		want = append(want, r.cells())
	}
	if err == nil && !equalTables(got, want) {
		err = errors.New("the table differs from the one the tests run")
	}
	if err != nil {
		t.Fatalf("%s, failure table %q: %v; it must read:\n<!-- failure-table:%s -->\n%s", DocPath, name, err, name, DocTable(rows))
	}
}

// ParseDocTable returns the cells of the markdown table after the marker
// "<!-- failure-table:<name> -->" in doc, header first, without the
// separator row, each cell trimmed and stripped of backquotes.
func ParseDocTable(doc, name string) ([][]string, error) {
	marker := "<!-- failure-table:" + name + " -->"
	i := strings.Index(doc, marker)
	if i < 0 {
		return nil, errors.New("no marker " + marker)
	}
	var table [][]string
	for _, line := range strings.Split(doc[i+len(marker):], "\n") {
		line = strings.TrimSpace(line)
		if line == "" && len(table) == 0 {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "`", "")))
		}
		if len(table) == 1 && strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the separator row
		}
		table = append(table, cells)
	}
	if len(table) == 0 {
		return nil, errors.New("no table after " + marker)
	}
	return table, nil
}

func equalTables(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// moduleRoot is the directory holding go.mod, above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
