package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/pace"
)

// tenantsActions are tenants' actions, which share one set of flags.
var tenantsActions = []string{"pause", "resume", "list"}

const tenantsExample = `owedctl tenants pause --tenant acme --reason "runaway campaign, ticket 4711"`

// tenantsCmd pauses, resumes and lists the tenants on-call paused
// (owed_tenant_pauses, internal/pace/sql/tenant_pauses.sql): the workers
// send nothing of a paused tenant, and give
// its claimed rows back to the queue without an attempt, until it is
// resumed. It connects as on-call's login, a member of owed_operator (the
// services' role may not pause a tenant), and writes through
// owed_tenant_pause and owed_tenant_resume, which record the login and
// write the audit line.
func tenantsCmd(ctx context.Context, args []string) error {
	return runTenants(ctx, os.Stdout, args)
}

// runTenants is tenantsCmd writing to out.
func runTenants(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl tenants pause --tenant T --reason TEXT [--operator NAME] | resume --tenant T [--reason TEXT] | list [--json]\n\n"+
		"  pause   stop every send of the tenant until it is resumed\n"+
		"  resume  send the tenant's rows again; they return from the queue within a minute\n"+
		"  list    the paused tenants, longest paused first\n\n"+
		"The database is --database-url, OWED_OPERATOR_DATABASE_URL or OWED_DATABASE_URL, as a member of owed_operator.\n\nexample:\n  "+tenantsExample+"\n"),
		tenantsActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("tenants "+action, "tenants "+action+" [--tenant T] [--reason TEXT] [--operator NAME] [--json] [--database-url URL]", tenantsExample)
	tenantID := fs.String("tenant", "", "pause, resume: the tenant")
	audit := addAuditFlags(fs, "why, for the audit trail and the other operators (pause: required; shown by list and in the rows' last error)")
	asJSON := fs.Bool("json", false, "list: print JSON")
	dbURL := operatorLogin.flag(fs, "database")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	switch {
	case action != "list" && *tenantID == "":
		return usageError{"--tenant: name the tenant"}
	case action == "pause" && *audit.reason == "":
		return usageError{"--reason: say why the tenant is paused"}
	}
	var who string
	if action != "list" {
		var err error
		if who, err = audit.operatorName(); err != nil {
			return err
		}
		if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
			return err
		}
	}
	tenants, done, err := openWith(operatorLogin.url(*dbURL), func(db *sql.DB) *pace.Tenants { return pace.NewTenants(db, nil) })
	if err != nil {
		return err
	}
	defer done()
	switch action {
	case "pause":
		if err := tenants.Pause(ctx, *tenantID, *audit.reason, who); err != nil {
			return operatorLogin.hint(err)
		}
		fmt.Fprintf(out, "tenant %s paused by %s: no worker sends its rows until `owedctl tenants resume --tenant %s`\n", *tenantID, who, *tenantID)
	case "resume":
		was, err := tenants.Resume(ctx, *tenantID, who, *audit.reason)
		if err != nil {
			return operatorLogin.hint(err)
		}
		if !was {
			fmt.Fprintf(out, "tenant %s was not paused; nothing changed\n", *tenantID)
			return nil
		}
		fmt.Fprintf(out, "tenant %s resumed by %s; the rows its pause held back return from the queue within a minute\n", *tenantID, who)
	default:
		list, err := tenants.List(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, nonNil(list))
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tPAUSED SINCE\tBY\tREASON")
		for _, p := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Tenant, p.Since.Format(time.RFC3339), p.Actor, p.Reason)
		}
		return tw.Flush()
	}
	return nil
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
