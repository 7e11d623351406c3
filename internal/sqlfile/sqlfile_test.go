package sqlfile

import (
	"slices"
	"strings"
	"testing"
)

const sample = `-- The file's own documentation, ignored.

-- fragment: cols
-- The columns every read returns.
id, state

-- name: Get
-- Get reads one row.
SELECT {{cols}} FROM t
 WHERE id = $1 -- the row's id

-- The lists.

-- name: List
SELECT {{ cols }} FROM t ORDER BY id
-- A section's introduction, not List's.
`

func TestParse(t *testing.T) {
	q, err := Parse("x/sql/queries.sql", sample)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := q.Names(), []string{"Get", "List"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if got, want := q.Text("Get"), "SELECT id, state FROM t\n WHERE id = $1 -- the row's id"; got != want {
		t.Errorf("Get's text = %q, want %q", got, want)
	}
	if got, want := q.Text("List"), "SELECT id, state FROM t ORDER BY id"; got != want {
		t.Errorf("List's text = %q, want %q", got, want)
	}
	if got, want := q.Unused(), []string{"Get", "List"}; !slices.Equal(got, want) {
		t.Errorf("Unused() before any Get = %q, want %q", got, want)
	}
	q.Get("List")
	if got, want := q.Unused(), []string{"Get"}; !slices.Equal(got, want) {
		t.Errorf("Unused() after Get(List) = %q, want %q", got, want)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"twice", "-- name: A\nSELECT 1\n-- name: A\nSELECT 2\n", `queries.sql:3: "A" is defined twice`},
		{"empty", "-- name: A\n-- only words\n", `queries.sql:1: name "A" has no SQL`},
		{"unknown fragment", "-- name: A\nSELECT {{b}}\n", `queries.sql:1: name "A" uses {{b}}, which no fragment before it defines`},
		{"fragment after use", "-- name: A\nSELECT {{b}}\n-- fragment: b\n1\n", `uses {{b}}`},
		{"bad name", "-- name: a-b\nSELECT 1\n", `name "a-b": a name is letters, digits and _`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x/sql/queries.sql", c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func TestUnusedFragment(t *testing.T) {
	q, err := Parse("f.sql", "-- fragment: spare\n1\n-- name: A\nSELECT 1\n")
	if err != nil {
		t.Fatal(err)
	}
	q.Get("A")
	if got, want := q.Unused(), []string{"fragment spare"}; !slices.Equal(got, want) {
		t.Errorf("Unused() = %q, want %q", got, want)
	}
}

func TestGetUnknownPanics(t *testing.T) {
	q, err := Parse("x/sql/queries.sql", "-- name: A\nSELECT 1\n")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), `x/sql/queries.sql has no query named "B"`) {
			t.Fatalf("Get(B) recovered %v, want a panic naming the file and the query", r)
		}
	}()
	q.Get("B")
}
