package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/owedhq/owed/internal/archive"
)

// holdActions are hold's actions.
var holdActions = []string{"add", "remove", "list"}

const holdExample = `owedctl hold add --tenant acme --reason "litigation hold, case 2026-114" --operator alice`

// holdCmd places, lifts and lists compliance holds (owed_retention_holds):
// a held tenant's months are never dropped by retention. It connects as
// the schema's owner, as retention does.
func holdCmd(ctx context.Context, args []string) error {
	return runHold(ctx, os.Stdout, args, time.Now())
}

// runHold is holdCmd writing to out, at now.
func runHold(ctx context.Context, out io.Writer, args []string, now time.Time) error {
	if err := needAction(args, printUsage("usage: owedctl hold add|remove --tenant T --reason R --operator NAME | list\n\n"+
		"  add      place a compliance hold on a tenant: retention keeps every month holding its rows\n"+
		"  remove   lift it\n"+
		"  list     the holds\n\n"+
		"Each add and remove is on the operators' trail. The database is --database-url or OWED_DATABASE_URL,\n"+
		"as the schema's owner (docs/scale.md).\n\nexample:\n  "+holdExample+"\n"), holdActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("hold "+action, "hold "+action+" [--tenant T --reason R --operator NAME] [--json] [--database-url URL]",
		holdExample)
	tenantID := fs.String("tenant", "", "add, remove: the tenant")
	reason := fs.String("reason", "", "add, remove: why, for the operators' trail")
	operator := fs.String("operator", "", "add, remove: who acts, for the operators' trail")
	asJSON := fs.Bool("json", false, "list: print the holds as JSON")
	dbURL := databaseFlag(fs, "the owed database, as the schema's owner")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	if action != "list" && (*tenantID == "" || *reason == "" || *operator == "") {
		return usageError{fmt.Sprintf("%s: give --tenant, --reason and --operator; got %q, %q, %q", action, *tenantID,
			*reason, *operator)}
	}
	if action != "list" {
		if err := checkWrites(ctx, *dbURL); err != nil {
			return err
		}
	}
	db, err := openDatabase(*dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	switch action {
	case "add":
		added, err := archive.AddHold(ctx, db, *tenantID, *reason, *operator, now)
		if err != nil {
			return err
		}
		if added {
			fmt.Fprintf(out, "held %s: retention keeps every month holding its rows\n", *tenantID)
		} else {
			fmt.Fprintf(out, "%s was held already; the hold stands as it was\n", *tenantID)
		}
	case "remove":
		had, err := archive.RemoveHold(ctx, db, *tenantID, *reason, *operator, now)
		if err != nil {
			return err
		}
		if had {
			fmt.Fprintf(out, "lifted the hold on %s\n", *tenantID)
		} else {
			fmt.Fprintf(out, "%s was not held; nothing changed\n", *tenantID)
		}
	case "list":
		holds, err := archive.Holds(ctx, db)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, holds)
		}
		for _, h := range holds {
			fmt.Fprintf(out, "%-24s since %s by %s (login %s): %s\n", h.Tenant, h.Since.UTC().Format(time.RFC3339),
				h.HeldBy, h.Login, h.Reason)
		}
		if len(holds) == 0 {
			fmt.Fprintln(out, "no tenant is held")
		}
	}
	return nil
}
