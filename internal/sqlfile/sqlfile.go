// Package sqlfile loads the named queries a package keeps in its
// sql/queries.sql (docs/sql.md), so every statement the Go code runs has one
// home beside the schema it runs on, as River keeps its queries in
// dbsqlc/*.sql. It parses; it never runs SQL.
//
// A file is a sequence of blocks. A block starts at a line
//
//	-- name: LeaseSlice
//
// (a query) or
//
//	-- fragment: notificationColumns
//
// (a piece several queries share), and runs to the next such line. The
// comment lines right after the header are the block's documentation, and
// comment lines after its last line of SQL introduce what follows (a
// section of the file); neither is sent to the server. The rest is the
// block's SQL, where {{fragmentName}} stands for a fragment defined earlier
// in the file. Lines before the first block are the file's own
// documentation.
//
// Each package binds its queries to package-level variables when it is
// initialised (Get), so a name missing from the file fails every test of
// the package, and internal/schema's test PREPAREs every query of every
// loaded file against a migrated database and fails on one no variable
// binds (All, Unused).
package sqlfile

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Queries is one file's named queries.
type Queries struct {
	file  string
	query map[string]string
	names []string // in file order
	// fragments and their use: an unused fragment is as dead as an unused
	// query.
	fragment map[string]string

	mu   sync.Mutex
	used map[string]bool
}

var (
	header    = regexp.MustCompile(`^--\s*(name|fragment):\s*(\S+)\s*$`)
	reference = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Parse parses src, the text of file (the repository path, for messages).
func Parse(file, src string) (*Queries, error) {
	q := &Queries{file: file, query: map[string]string{}, fragment: map[string]string{}, used: map[string]bool{}}
	type block struct {
		kind, name string
		line       int
		body       []string
	}
	var blocks []*block
	for i, line := range strings.Split(src, "\n") {
		if m := header.FindStringSubmatch(line); m != nil {
			blocks = append(blocks, &block{kind: m[1], name: m[2], line: i + 1})
			continue
		}
		if len(blocks) > 0 {
			b := blocks[len(blocks)-1]
			b.body = append(b.body, line)
		}
	}
	for _, b := range blocks {
		if !validName.MatchString(b.name) {
			return nil, fmt.Errorf("%s:%d: %s %q: a name is letters, digits and _", file, b.line, b.kind, b.name)
		}
		if _, dup := q.query[b.name]; dup {
			return nil, fmt.Errorf("%s:%d: %q is defined twice", file, b.line, b.name)
		}
		if _, dup := q.fragment[b.name]; dup {
			return nil, fmt.Errorf("%s:%d: %q is defined twice", file, b.line, b.name)
		}
		// The documentation: comment lines (and blank ones) before the
		// first line of SQL.
		body := b.body
		for len(body) > 0 && (strings.HasPrefix(strings.TrimSpace(body[0]), "--") || strings.TrimSpace(body[0]) == "") {
			body = body[1:]
		}
		// Comment lines after the last line of SQL document what follows
		// (a section of the file), not this block.
		for len(body) > 0 && (strings.HasPrefix(strings.TrimSpace(body[len(body)-1]), "--") || strings.TrimSpace(body[len(body)-1]) == "") {
			body = body[:len(body)-1]
		}
		text := strings.TrimRight(strings.Join(body, "\n"), " \t\n")
		if text == "" {
			return nil, fmt.Errorf("%s:%d: %s %q has no SQL", file, b.line, b.kind, b.name)
		}
		var missing string
		text = reference.ReplaceAllStringFunc(text, func(ref string) string {
			name := reference.FindStringSubmatch(ref)[1]
			f, ok := q.fragment[name]
			if !ok {
				missing = name
				return ref
			}
			q.used[name] = true
			return f
		})
		if missing != "" {
			return nil, fmt.Errorf("%s:%d: %s %q uses {{%s}}, which no fragment before it defines",
				file, b.line, b.kind, b.name, missing)
		}
		if b.kind == "fragment" {
			q.fragment[b.name] = text
		} else {
			q.query[b.name] = text
			q.names = append(q.names, b.name)
		}
	}
	return q, nil
}

// registry holds every file MustParse loaded, for internal/schema's test.
var registry struct {
	sync.Mutex
	all []*Queries
}

// MustParse is Parse for a file embedded in the binary, where a mistake is
// the build's: it panics, which fails every test of the package that loads
// it. The file is registered for All.
func MustParse(file, src string) *Queries {
	q, err := Parse(file, src)
	if err != nil {
		panic(err)
	}
	registry.Lock()
	registry.all = append(registry.all, q)
	registry.Unlock()
	return q
}

// All returns every file MustParse loaded in this binary.
func All() []*Queries {
	registry.Lock()
	defer registry.Unlock()
	return append([]*Queries(nil), registry.all...)
}

// Get returns the query named name and records that it is used. A name the
// file does not hold panics: bind queries to package-level variables, so
// that happens when the package is initialised.
func (q *Queries) Get(name string) string {
	text, ok := q.query[name]
	if !ok {
		panic(fmt.Sprintf("sqlfile: %s has no query named %q", q.file, name))
	}
	q.mu.Lock()
	q.used[name] = true
	q.mu.Unlock()
	return text
}

// File is the file's repository path.
func (q *Queries) File() string { return q.file }

// Names lists the file's queries in file order.
func (q *Queries) Names() []string { return append([]string(nil), q.names...) }

// Text returns a query's SQL without recording a use.
func (q *Queries) Text(name string) string { return q.query[name] }

// Unused lists the queries no Get has asked for, and the fragments no query
// uses, sorted.
func (q *Queries) Unused() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for n := range q.query {
		if !q.used[n] {
			out = append(out, n)
		}
	}
	for n := range q.fragment {
		if !q.used[n] {
			out = append(out, "fragment "+n)
		}
	}
	sort.Strings(out)
	return out
}
