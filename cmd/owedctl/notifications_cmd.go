package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// notificationsActions are notifications' actions.
var notificationsActions = []string{"show", "find"}

const notificationsExample = "owedctl notifications find --tenant acme --recipient user-42 --kind reminder"

// notificationsCmd answers "was this customer notified, and when" from the
// ledger: one row with every attempt (show), or a tenant's rows (find).
func notificationsCmd(ctx context.Context, args []string) error {
	return runNotifications(ctx, os.Stdout, args)
}

// runNotifications is notificationsCmd writing to out, so tests read what an
// operator would see.
func runNotifications(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl notifications show ID|find --tenant T [flags]\n\n"+
		"  show ID   one row of any tenant, with every send attempt and its outcome\n"+
		"  find      a tenant's rows, newest due first (--recipient, --ref, --kind, --limit)\n\n"+
		"The database is --database-url or OWED_DATABASE_URL.\n\nexample:\n  "+notificationsExample+"\n"),
		notificationsActions); err != nil {
		return err
	}
	if args[0] == "show" {
		return notificationsShow(ctx, out, args[1:])
	}
	return notificationsFind(ctx, out, args[1:])
}

func ledgerDatabaseFlag(fs *flag.FlagSet) *string {
	return databaseFlag(fs, "the owed database; the application role suffices")
}

func openLedger(dbURL string) (*ledger.Ledger, func(), error) {
	return openWith(dbURL, func(db *sql.DB) *ledger.Ledger { return ledger.New(db, nil) })
}

func notificationsShow(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("notifications show", "notifications show ID [--json] [--database-url URL]",
		"owedctl notifications show 4711")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	dbURL := ledgerDatabaseFlag(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"show takes exactly one notification id"}
	}
	id, err := ops.ParseID(pos[0])
	if err != nil {
		return usageError{err.Error()}
	}
	l, closeDB, err := openLedger(readLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer closeDB()
	d, err := ops.ShowNotification(ctx, l, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, d)
	}
	printDetail(out, d)
	return nil
}

func notificationsFind(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("notifications find",
		"notifications find --tenant T [--recipient R] [--ref X] [--kind K] [--limit N] [--json] [--database-url URL]",
		notificationsExample)
	tenant := fs.String("tenant", "", "tenant whose rows to list (required)")
	recipient := fs.String("recipient", "", "only this recipient")
	ref := fs.String("ref", "", "only rows about this subject reference (ref_id)")
	kind := fs.String("kind", "", "only this kind, e.g. reminder")
	limit := fs.Int("limit", 50, fmt.Sprintf("at most this many rows, newest due first (up to %d)", ledger.MaxFindLimit))
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseOnlyFlags(fs, args, ": find takes only flags"); err != nil {
		return err
	}
	if *tenant == "" {
		return usageError{"--tenant is required: rows are only ever listed within one tenant"}
	}
	if *limit < 1 || *limit > ledger.MaxFindLimit {
		return usageError{fmt.Sprintf("--limit=%d must be 1 to %d", *limit, ledger.MaxFindLimit)}
	}
	l, closeDB, err := openLedger(readLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer closeDB()
	rows, err := ops.FindNotifications(ctx, l, *tenant, ledger.Filter{Recipient: *recipient, RefID: *ref, Kind: *kind, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, map[string]any{"notifications": rows})
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no notifications of tenant %q match\n", *tenant)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tDUE\tDELIVERED\tRECIPIENT\tCHANNEL\tKIND\tREF\tATTEMPTS\tPROVIDER\tPROVIDER MESSAGE ID")
	for _, n := range rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.State, stamp(&n.DueAt),
			stamp(n.DeliveredAt), n.Recipient, n.Channel, n.Kind, n.RefID, n.Attempts, dash(n.Provider), dash(n.ProviderMessageID))
	}
	return w.Flush()
}

// printDetail prints one row as a field list, then its attempts as a table.
func printDetail(out io.Writer, d ledger.Detail) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	n := d.Notification
	for _, f := range [][2]string{
		{"id", strconv.FormatInt(n.ID, 10)},
		{"tenant", n.Tenant},
		{"state", string(n.State)},
		{"recipient", n.Recipient},
		{"channel", n.Channel},
		{"kind", n.Kind},
		{"ref", n.RefID},
		{"due", stamp(&n.DueAt)},
		{"expires", stamp(n.ExpiresAt)},
		{"published", stamp(n.PublishedAt)},
		{"claimed", stamp(n.ClaimedAt)},
		{"delivered", stamp(n.DeliveredAt)},
		{"settled", stamp(n.SettledAt)},
		{"attempts", strconv.Itoa(n.Attempts)},
		{"provider", dash(n.Provider)},
		{"provider message id", dash(n.ProviderMessageID)},
		{"last error", dash(n.LastError)},
		{"receipt", receiptLine(d.Outcome)},
	} {
		fmt.Fprintf(w, "%s:\t%s\n", f[0], f[1])
	}
	w.Flush()
	fmt.Fprintln(out)
	if len(d.History) == 0 {
		fmt.Fprintln(out, "no send attempts")
		printTimeline(out, ops.Timeline(d))
		return
	}
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ATTEMPT\tSTARTED\tTOOK\tPROVIDER\tOUTCOME\tHTTP\tPROVIDER MESSAGE ID\tERROR")
	for _, a := range d.History {
		outcome := string(a.Outcome)
		if a.PossibleDuplicate {
			outcome += " (possible duplicate)"
		}
		status := "-"
		if a.HTTPStatus != 0 {
			status = strconv.Itoa(a.HTTPStatus)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, stamp(&a.StartedAt),
			a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond), a.Provider, outcome, status,
			dash(a.ProviderMessageID), dash(strings.ReplaceAll(a.Error, "\n", " ")))
	}
	w.Flush()
	printReceipts(out, d.Receipts)
	printTimeline(out, ops.Timeline(d))
}

// printTimeline prints the row's life in time order, as the console's
// notification page shows it.
func printTimeline(out io.Writer, events []ops.Event) {
	fmt.Fprintln(out, "\ntimeline:")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, e := range events {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\n", stamp(&e.At), e.What, dash(e.Outcome), dash(e.Provider),
			dash(e.ProviderMessageID), dash(strings.ReplaceAll(e.Detail, "\n", " ")))
	}
	w.Flush()
}

// receiptLine is a row's confirmed outcome: "bounced (HardBounce) at …",
// or "-" when no provider has said anything since it accepted the send.
func receiptLine(o ledger.Outcome) string {
	if o.ReceiptStatus == "" {
		return "-"
	}
	line := string(o.ReceiptStatus)
	if o.ReceiptCode != "" {
		line += " (" + o.ReceiptCode + ")"
	}
	return line + " at " + stamp(o.ConfirmedAt)
}

// printReceipts prints what the providers said after accepting the sends.
func printReceipts(out io.Writer, receipts []ledger.Receipt) {
	fmt.Fprintln(out)
	if len(receipts) == 0 {
		fmt.Fprintln(out, "no receipts from the provider")
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RECEIPT\tOCCURRED\tRECEIVED\tPROVIDER\tPROVIDER MESSAGE ID\tCODE")
	for _, r := range receipts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Status, stamp(r.OccurredAt), stamp(&r.ReceivedAt), r.Provider,
			r.ProviderMessageID, dash(r.Code))
	}
	w.Flush()
}

// stamp prints a time in UTC to the second, "-" when unset: operators compare
// these against provider dashboards, which show UTC.
func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
