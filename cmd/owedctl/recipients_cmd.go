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

// recipientsActions are recipients' actions, which share one set of flags.
var recipientsActions = []string{"list", "clear"}

const recipientsExample = "owedctl recipients clear --tenant acme --channel sms --address +15550100"

// recipientsCmd shows and clears a tenant's undeliverable recipients: the
// addresses a provider refused as the recipient's own (a STOP reply, a
// blocked bot, an inactive address), to which the workers send nothing
// until the mark is cleared (owed_undeliverable,
// internal/ledger/sql/undeliverable.sql). It connects as the runtime
// role and works in the tenant's scope.
func recipientsCmd(ctx context.Context, args []string) error {
	return runRecipients(ctx, os.Stdout, args)
}

// runRecipients is recipientsCmd writing to out.
func runRecipients(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl recipients list --tenant T [--channel C] | clear --tenant T --channel C --address A\n\n"+
		"  list    a tenant's undeliverable addresses, newest first, with the provider's code\n"+
		"  clear   make an address sendable again (the customer re-subscribed: START)\n\n"+
		"The database is --database-url or OWED_DATABASE_URL.\n\nexample:\n  "+recipientsExample+"\n"),
		recipientsActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("recipients "+action, "recipients "+action+" --tenant T --channel C [--address A] [--database-url URL]", recipientsExample)
	tenantID := fs.String("tenant", "", "the tenant")
	channel := fs.String("channel", "", "the channel (sms, email, telegram, slack, webhook); list: all when empty")
	address := fs.String("address", "", "clear: the resolved address the provider refused, as list prints it")
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case *tenantID == "":
		return usageError{"--tenant: name the tenant"}
	case action == "clear" && (*channel == "" || *address == ""):
		return usageError{"clear: give --channel and --address"}
	}
	l, done, err := openLedger(*dbURL)
	if err != nil {
		return err
	}
	defer done()
	if action == "clear" {
		if err := checkWrites(ctx, *dbURL); err != nil {
			return err
		}
		was, err := l.ClearUndeliverable(ctx, *tenantID, *channel, *address)
		if err != nil {
			return err
		}
		if !was {
			fmt.Fprintf(out, "%s on %s was not marked undeliverable in tenant %s; nothing changed\n", *address, *channel, *tenantID)
			return nil
		}
		fmt.Fprintf(out, "%s on %s in tenant %s is sendable again\n", *address, *channel, *tenantID)
		return nil
	}
	marks, err := l.ListUndeliverable(ctx, *tenantID, *channel)
	if err != nil {
		return err
	}
	printUndeliverable(out, marks)
	return nil
}

func printUndeliverable(out io.Writer, marks []ledger.Undeliverable) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANNEL\tADDRESS\tPROVIDER\tCODE\tMARKED\tNOTIFICATION\tREASON")
	for _, u := range marks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", u.Channel, u.Address, u.Provider, u.Code,
			u.MarkedAt.UTC().Format(time.RFC3339), u.NotificationID, u.Reason)
	}
	tw.Flush()
	if len(marks) == 0 {
		fmt.Fprintln(out, "no undeliverable recipients")
	}
}
