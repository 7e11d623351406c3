package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// digestsActions are digests' actions, which share one set of flags.
var digestsActions = []string{"list", "set"}

const digestsExample = "owedctl digests set --tenant acme --kind follow_up --window 10m"

// digestsCmd lists and sets a tenant's digestible kinds (owed_digests,
// internal/ledger/sql/digests.sql) as PUT /v1/digests does, through the
// ledger in the tenant's scope: the application role suffices.
func digestsCmd(ctx context.Context, args []string) error {
	return runDigests(ctx, os.Stdout, args)
}

// runDigests is digestsCmd writing to out.
func runDigests(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl digests list --tenant T [--json] | set --tenant T --kind K --window D\n\n"+
		"  list  the tenant's digestible kinds and their windows\n"+
		"  set   declare a kind digestible with a window (10m), or turn digesting off for it (--window 0):\n"+
		"        rows of the kind to one recipient on one channel due within one window go out as one message\n\n"+
		"The database is --database-url or OWED_DATABASE_URL.\n\nexample:\n  "+digestsExample+"\n"),
		digestsActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("digests "+action, "digests "+action+" --tenant T [--kind K --window D] [--json] [--database-url URL]", digestsExample)
	tenantID := fs.String("tenant", "", "the tenant")
	kind := fs.String("kind", "", "set: the kind of notification")
	window := fs.Duration("window", -1, "set: how long a digest gathers after its first member's due time (0 turns digesting off)")
	asJSON := fs.Bool("json", false, "print JSON")
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	switch {
	case *tenantID == "":
		return usageError{"--tenant: name the tenant"}
	case action == "set" && *kind == "":
		return usageError{"--kind: name the kind to digest"}
	case action == "set" && *window < 0:
		return usageError{"--window: give the window (10m), or 0 to turn digesting off"}
	}
	l, closeDB, err := openLedger(*dbURL)
	if err != nil {
		return err
	}
	defer closeDB()
	if action == "set" {
		d := ledger.Digest{Kind: *kind, Window: *window}
		res, err := l.SetDigest(ctx, *tenantID, d)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, map[string]any{"kind": d.Kind, "window": d.Window.String(), "undigested": res.Undigested})
		}
		if d.Window == 0 {
			fmt.Fprintf(out, "digesting off for %s of tenant %s; %d pending rows left their digests\n", d.Kind, *tenantID, res.Undigested)
			return nil
		}
		fmt.Fprintf(out, "%s of tenant %s is digested in windows of %s\n", d.Kind, *tenantID, d.Window)
		return nil
	}
	list, err := l.Digests(ctx, *tenantID)
	if err != nil {
		return err
	}
	if *asJSON {
		type view struct {
			Kind   string `json:"kind"`
			Window string `json:"window"`
		}
		vs := make([]view, len(list))
		for i, d := range list {
			vs[i] = view{d.Kind, d.Window.String()}
		}
		return printJSON(out, vs)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tWINDOW")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\n", d.Kind, d.Window.Round(time.Second))
	}
	return tw.Flush()
}
