package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// quietActions are quiet-hours' actions, which share one set of flags.
var quietActions = []string{"set", "get", "clear"}

const quietExample = `owedctl quiet-hours set --tenant acme --window "mon-fri 08:00-20:00" --window "sat 10:00-14:00" --time-zone Europe/Berlin --reason "ticket 88"`

// quietCmd sets, reads and clears a tenant's send windows (quiet hours are
// the time outside them), as PUT and GET /v1/quiet-hours do
// (ledger.SetQuietHours, ledger.QuietHoursOf): per tenant, per kind
// (--kind) or per recipient (--recipient), the most specific scope
// applying to a row. A change moves the tenant's pending rows, and the
// moves waiting on sends, to the new rule at once. The writes connect as
// on-call's login and write an audit line.
func quietCmd(ctx context.Context, args []string) error {
	return runQuiet(ctx, os.Stdout, args)
}

// windowsFlag is a repeatable --window.
type windowsFlag []string

func (w *windowsFlag) String() string     { return strings.Join(*w, ", ") }
func (w *windowsFlag) Set(s string) error { *w = append(*w, s); return nil }

// runQuiet is quietCmd writing to out.
func runQuiet(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl quiet-hours set|clear --tenant T [--kind K | --recipient R] [flags] | get --tenant T [--json]\n\n"+
		"  set    send the scope's rows only inside these windows (--window, repeatable) on the recipient's clock\n"+
		"  clear  remove the scope's windows: its held rows go back to the time they asked for\n"+
		"  get    every scope of the tenant's windows\n\n"+
		"A scope is the tenant (neither --kind nor --recipient), one kind, or one recipient. The database is\n"+
		"--database-url, OWED_OPERATOR_DATABASE_URL or OWED_DATABASE_URL (set and clear: as a member of owed_operator).\n\n"+
		"example:\n  "+quietExample+"\n"), quietActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("quiet-hours "+action, "quiet-hours "+action+" --tenant T [--kind K | --recipient R] [--window W]... [--time-zone Z] "+
		"[--reason TEXT] [--operator NAME] [--json] [--database-url URL]", quietExample)
	tenantID := fs.String("tenant", "", "the tenant (required)")
	kind := fs.String("kind", "", "set, clear: the scope of one kind's rows")
	recipient := fs.String("recipient", "", "set, clear: the scope of one recipient's rows")
	var windows windowsFlag
	fs.Var(&windows, "window", `set: a send window like "mon-fri 08:00-20:00", "sat,sun 10:00-18:00" or "daily 22:00-06:00" (repeat for several)`)
	zone := fs.String("time-zone", "", "set: the IANA zone of a row with none of its own whose contact names none (default UTC)")
	audit := addAuditFlags(fs, "set, clear: why, for the audit trail (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	dbURL := operatorLogin.flag(fs, "the owed database")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	q := ledger.QuietHours{Scope: "tenant", Windows: windows, TimeZone: *zone}
	switch {
	case *tenantID == "":
		return usageError{"--tenant: name the tenant"}
	case *kind != "" && *recipient != "":
		return usageError{"give --kind or --recipient, not both: a scope is one of them, or the tenant"}
	case *kind != "":
		q.Scope = "kind:" + *kind
	case *recipient != "":
		q.Scope = "recipient:" + *recipient
	}
	switch {
	case action == "get" && (*kind != "" || *recipient != "" || len(windows) > 0 || *zone != ""):
		return usageError{"get lists every scope of the tenant: it takes --tenant alone"}
	case action == "set" && len(windows) == 0:
		return usageError{`--window: give at least one, like "mon-fri 08:00-20:00" (clear removes a scope)`}
	case action == "clear" && (len(windows) > 0 || *zone != ""):
		return usageError{"clear removes the scope's windows: it takes no --window or --time-zone"}
	case action != "get" && *audit.reason == "":
		return usageError{"--reason: say why the windows change; the audit trail records it"}
	}
	if action == "get" {
		l, done, err := openLedger(operatorLogin.url(*dbURL))
		if err != nil {
			return err
		}
		defer done()
		scopes, err := l.QuietHoursOf(ctx, *tenantID)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, scopes)
		}
		if len(scopes) == 0 {
			fmt.Fprintf(out, "tenant %s has no send windows: its rows are sent when they are due\n", *tenantID)
			return nil
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCOPE\tWINDOWS\tZONE")
		for _, s := range scopes {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Scope, strings.Join(s.Windows, ", "), dash(s.TimeZone))
		}
		return tw.Flush()
	}
	if err := ledger.ValidateQuietHours(*tenantID, q); err != nil {
		return usageError{flagNames(err, nil)}
	}
	who, err := audit.operatorName()
	if err != nil {
		return err
	}
	if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
		return err
	}
	l, done, err := openLedger(operatorLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer done()
	res, err := l.SetQuietHours(ctx, *tenantID, q)
	var v *ledger.ValidationError
	if errors.As(err, &v) {
		return usageError{flagNames(v, nil)}
	}
	if err != nil {
		return operatorLogin.hint(err)
	}
	target := "tenant=" + *tenantID + " scope=" + q.Scope
	if len(windows) > 0 {
		target += " windows=" + strings.Join(windows, ",")
	}
	if err := ops.Record(ctx, l, zerolog.Nop(), ledger.OperatorAction{Operator: who, Action: "quiet_hours_" + action,
		Target: target, Count: res.Held + res.Released + res.Expired + res.Merged, Reason: *audit.reason}); err != nil {
		return fmt.Errorf("the quiet hours are changed, but the audit line was not written: %w", err)
	}
	if *asJSON {
		return printJSON(out, res)
	}
	verb := "set"
	if action == "clear" {
		verb = "cleared"
	}
	fmt.Fprintf(out, "quiet hours of tenant %s, scope %s, %s: %d rows held, %d released, %d expired inside their hold, "+
		"%d merged onto a row at the same opening\n", *tenantID, q.Scope, verb, res.Held, res.Released, res.Expired, res.Merged)
	return nil
}

var _ flag.Value = (*windowsFlag)(nil)
