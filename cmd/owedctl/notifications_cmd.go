package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// notificationsActions are notifications' actions.
var notificationsActions = []string{"show", "list", "find", "update"}

const notificationsExample = "owedctl notifications list --tenant acme --state failed --channel sms --due-from 2026-12-01"

// notificationsCmd answers "was this customer notified, and when" from the
// ledger: one row with every attempt (show), or a tenant's rows (list, and
// its older name find).
func notificationsCmd(ctx context.Context, args []string) error {
	return runNotifications(ctx, os.Stdout, args)
}

// runNotifications is notificationsCmd writing to out, so tests read what an
// operator would see.
func runNotifications(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl notifications show ID|list --tenant T [flags]|update ID [flags]\n\n"+
		"  show ID   one row of any tenant, with every send attempt and its outcome\n"+
		"  list      a tenant's rows, newest due first, a page at a time, with the counts by state (--state, --kind,\n"+
		"            --channel, --recipient, --recipient-prefix, --ref, --due-from, --due-to, --settled-from,\n"+
		"            --settled-to, --limit, --cursor); find is its older name\n\n"+
		"The database is --database-url or OWED_DATABASE_URL (update: OWED_OPERATOR_DATABASE_URL first, as a member of\n"+
		"owed_operator).\n\nexample:\n  "+notificationsExample+"\n"),
		notificationsActions); err != nil {
		return err
	}
	switch args[0] {
	case "show":
		return notificationsShow(ctx, out, args[1:])
	case "update":
		return notificationsUpdate(ctx, out, args[1:])
	}
	return notificationsList(ctx, out, args[0], args[1:])
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

func notificationsList(ctx context.Context, out io.Writer, action string, args []string) error {
	fs := newFlags("notifications "+action,
		"notifications "+action+" --tenant T [--state S] [--kind K] [--channel C] [--recipient R] [--recipient-prefix P] [--ref X]\n"+
			"    [--due-from T] [--due-to T] [--settled-from T] [--settled-to T] [--limit N] [--cursor C] [--json] [--database-url URL]",
		notificationsExample)
	var q ops.ListQuery
	fs.StringVar(&q.Tenant, "tenant", "", "tenant whose rows to list (required)")
	fs.StringVar(&q.State, "state", "", "only rows in this state: "+ops.ListStateNames())
	fs.StringVar(&q.Kind, "kind", "", "only this kind, e.g. reminder")
	fs.StringVar(&q.Channel, "channel", "", "only this channel, e.g. sms")
	fs.StringVar(&q.Recipient, "recipient", "", "only this recipient")
	fs.StringVar(&q.RecipientPrefix, "recipient-prefix", "", "only recipients starting with this, e.g. +4420")
	fs.StringVar(&q.Ref, "ref", "", "only rows about this subject reference (ref_id)")
	fs.StringVar(&q.DueFrom, "due-from", "", "only rows due at or after this time (RFC 3339, or 2026-12-02T09:30 or 2026-12-02 in UTC)")
	fs.StringVar(&q.DueTo, "due-to", "", "only rows due before this time (as --due-from)")
	fs.StringVar(&q.SettledFrom, "settled-from", "", "only rows settled at or after this time (as --due-from)")
	fs.StringVar(&q.SettledTo, "settled-to", "", "only rows settled before this time (as --due-from)")
	fs.StringVar(&q.Cursor, "cursor", "", "start after this position: the next_cursor a previous page printed")
	limit := fs.Int("limit", 50, fmt.Sprintf("at most this many rows, newest due first (up to %d)", ledger.MaxFindLimit))
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseOnlyFlags(fs, args, ": "+action+" takes only flags"); err != nil {
		return err
	}
	if *limit < 1 || *limit > ledger.MaxFindLimit {
		return usageError{fmt.Sprintf("--limit=%d must be 1 to %d", *limit, ledger.MaxFindLimit)}
	}
	if _, _, err := q.Parse(); err != nil {
		return usageError{err.Error()}
	}
	l, closeDB, err := openLedger(readLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer closeDB()
	page, err := ops.ListNotifications(ctx, l, q, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, page)
	}
	counts := []string{}
	for _, st := range ops.ListStates() {
		if n := page.Counts.ByState[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", st, n))
		}
	}
	atLeast := ""
	if page.Counts.AtLeast {
		atLeast = "at least "
	}
	if len(page.Rows) == 0 {
		fmt.Fprintf(out, "no notifications of tenant %q match\n", q.Tenant)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tDUE\tSETTLED\tRECIPIENT\tCHANNEL\tKIND\tREF\tATTEMPTS\tPROVIDER\tPROVIDER MESSAGE ID")
	for _, n := range page.Rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.State, stamp(&n.DueAt),
			stamp(n.SettledAt), n.Recipient, n.Channel, n.Kind, n.RefID, n.Attempts, dash(n.Provider), dash(n.ProviderMessageID))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s%d match: %s\n", atLeast, page.Counts.Total, strings.Join(counts, ", "))
	if page.Next != "" {
		fmt.Fprintf(out, "next page: --cursor %s\n", page.Next)
	}
	return nil
}

// printDetail prints one row as a field list, then its attempts as a table.
func printDetail(out io.Writer, d ledger.Detail) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	n := d.Notification
	// The zone, the local time asked and a hold for quiet hours, when the
	// row has them, after its times.
	var local [][2]string
	if n.TimeZone != "" {
		local = append(local, [2]string{"time zone", n.TimeZone}, [2]string{"local time asked", dash(n.DueLocal)})
	}
	if n.Hold != "" {
		local = append(local, [2]string{"quiet hours", n.Hold + " (asked for " + stamp(n.HeldFrom) + ")"})
	}
	fields := [][2]string{
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
		{"digest", digestLine(n)},
		{"last error", dash(n.LastError)},
		{"receipt", receiptLine(d.Outcome)},
	}
	for _, f := range slices.Insert(fields, 9, local...) {
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

// digestLine names the digest a row is in, or went out in (docs/api.md,
// "Digests"), and the due time it asked for; "-" for a row sent alone.
func digestLine(n ledger.Notification) string {
	if n.DigestID == 0 {
		return "-"
	}
	line := strconv.FormatInt(n.DigestID, 10)
	if n.DigestFrom != nil {
		line += " (asked for " + stamp(n.DigestFrom) + ")"
	}
	return line
}
