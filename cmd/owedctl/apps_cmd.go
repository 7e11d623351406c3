package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/apps"
)

// appsActions are apps' actions, which share one set of flags.
var appsActions = []string{"bind", "unbind", "list"}

const appsExample = `owedctl apps bind --login crm_sql --tenant acme --reason "the CRM's reporting jobs"`

// appsCmd binds an owed_apps login (an application's own SQL login) to the
// tenants it may name, unbinds it, and lists the bindings: a login of
// owed_apps sees and writes nothing of a tenant it is not bound to
// (internal/apps). Binding hands out a tenant's credentials, as minting a
// token does, so it connects as a member of owed_token_admin, as owedctl
// tokens does; each bind and unbind is a line of the operators' audit
// trail with the operator (--operator, or the OS user) and the database
// login.
func appsCmd(ctx context.Context, args []string) error {
	return runApps(ctx, os.Stdout, args)
}

// runApps is appsCmd writing to out.
func runApps(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl apps bind|unbind --login L --tenant T [--operator NAME] [--reason TEXT] | list [--login L] [--json]\n\n"+
		"  bind    let the owed_apps login L name tenant T (GRANT owed_apps TO L first)\n"+
		"  unbind  stop it: its next statement in T's scope sees nothing\n"+
		"  list    the bindings, of L or of every login\n\n"+
		"The database is --database-url, OWED_TOKEN_ADMIN_DATABASE_URL or OWED_DATABASE_URL, as a member of owed_token_admin (owed_admin in the local stacks).\n\nexample:\n  "+appsExample+"\n"),
		appsActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("apps "+action, "apps "+action+" [--login L] [--tenant T] [--operator NAME] [--reason TEXT] [--json] [--database-url URL]", appsExample)
	login := fs.String("login", "", "the owed_apps login (a Postgres role name); list: only its bindings")
	tenantID := fs.String("tenant", "", "bind, unbind: the tenant")
	audit := addAuditFlags(fs, "bind, unbind: why, for the audit trail (optional)")
	asJSON := fs.Bool("json", false, "list: print JSON")
	dbURL := tokenAdminLogin.flag(fs, "database holding owed_apps_logins; the services' role may not bind")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	if action != "list" {
		switch {
		case *login == "":
			return usageError{"--login: name the owed_apps login"}
		case *tenantID == "":
			return usageError{"--tenant: name the tenant"}
		}
	}
	var who string
	if action != "list" {
		var err error
		if who, err = audit.operatorName(); err != nil {
			return err
		}
	}
	bindings, done, err := openWith(tokenAdminLogin.url(*dbURL), func(db *sql.DB) *apps.Bindings { return apps.New(db) })
	if err != nil {
		return err
	}
	defer done()
	switch action {
	case "bind":
		added, err := bindings.Bind(ctx, *login, *tenantID, who, *audit.reason)
		if err != nil {
			return tokenAdminLogin.hint(err)
		}
		if !added {
			fmt.Fprintf(out, "login %s was bound to tenant %s already; nothing changed\n", *login, *tenantID)
			return nil
		}
		fmt.Fprintf(out, "login %s may name tenant %s (bound by %s)\n", *login, *tenantID, who)
	case "unbind":
		had, err := bindings.Unbind(ctx, *login, *tenantID, who, *audit.reason)
		if err != nil {
			return tokenAdminLogin.hint(err)
		}
		if !had {
			fmt.Fprintf(out, "login %s was not bound to tenant %s; nothing changed\n", *login, *tenantID)
			return nil
		}
		fmt.Fprintf(out, "login %s no longer sees tenant %s (unbound by %s)\n", *login, *tenantID, who)
	default:
		list, err := bindings.List(ctx, *login)
		if err != nil {
			return tokenAdminLogin.hint(err)
		}
		if *asJSON {
			return printJSON(out, list)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LOGIN\tTENANT\tBOUND\tBY\tAS LOGIN")
		for _, b := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Login, b.Tenant, b.BoundAt.Format(time.RFC3339), b.BoundBy, b.BoundLogin)
		}
		return tw.Flush()
	}
	return nil
}
