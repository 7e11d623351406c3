package ledger

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// roleTypes are the roles a *Ledger embeds.
var roleTypes = []any{(*Sweep)(nil), (*Work)(nil), (*Scheduling)(nil), (*Reads)(nil), (*Actions)(nil), (*Receipts)(nil)}

// Every method of the ledger belongs to exactly one role, and a *Ledger has
// every role's methods and no other: a method two roles defined would be
// ambiguous on *Ledger, and one defined on *Ledger itself (a merge that
// kept the old receiver) would be reachable by no part.
func TestRolesPartitionTheLedger(t *testing.T) {
	shared := map[string]bool{"DB": true}
	owner := map[string]string{}
	for _, r := range roleTypes {
		typ := reflect.TypeOf(r)
		role := typ.Elem().Name()
		for i := 0; i < typ.NumMethod(); i++ {
			name := typ.Method(i).Name
			if shared[name] || name == role+"Role" {
				continue
			}
			if prev, ok := owner[name]; ok {
				t.Errorf("%s is a method of both %s and %s: give it one role", name, prev, role)
			}
			owner[name] = role
		}
	}
	l := reflect.TypeOf((*Ledger)(nil))
	for name, role := range owner {
		if _, ok := l.MethodByName(name); !ok {
			t.Errorf("*Ledger has no %s (a method of %s)", name, role)
		}
	}
	for i := 0; i < l.NumMethod(); i++ {
		name := l.Method(i).Name
		if _, ok := owner[name]; !ok && !shared[name] && !strings.HasSuffix(name, "Role") {
			t.Errorf("*Ledger has %s, which no role has: define it on the role that calls it", name)
		}
	}
	if n := len(owner); n == 0 {
		t.Fatal("the roles have no methods")
	}
}

// compositionRoots may hold a whole *Ledger: they build one and hand each
// part its role. Everything else takes the role it calls (roles.go).
var compositionRoots = []string{
	"cmd/",                // the binaries' mains
	"bench/",              // the benchmark programs
	"internal/sweeper/",   // assembles the sweep, the API, the receipts and the console
	"internal/stacktest/", // the tests' running stack
}

// A package outside the composition roots that names *ledger.Ledger (a
// field, a parameter, a variable of its type) depends on every role where
// one or two suffice; this fails until it takes its roles instead.
func TestOnlyCompositionRootsHoldTheWholeLedger(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	const path = "github.com/owedhq/owed/internal/ledger"
	fset := token.NewFileSet()
	var found []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			// A nested module is not this module's code.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "internal/ledger/") {
			return nil
		}
		for _, r := range compositionRoots {
			if strings.HasPrefix(rel, r) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if v, _ := strconv.Unquote(imp.Path.Value); v == path {
				local = "ledger"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Ledger" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
					found = append(found, fset.Position(sel.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range found {
		t.Errorf("%s names *ledger.Ledger: take the role it calls (ledger.Sweep, Work, Scheduling, Reads, Actions, "+
			"Receipts, or a Has* interface of them), or list the package as a composition root", at)
	}
}
