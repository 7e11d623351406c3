package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/rest"
)

// queueFlags are the flags every command talking to the queue shares. The
// backend and its settings come from the environment, as for the services
// (OWED_QUEUE_BACKEND and its variables, see internal/queue/backends), so a
// token never shows in a process list or shell history. --queue names a REST
// queue only.
type queueFlags struct {
	fs   *flag.FlagSet
	name *string
	json *bool
}

func addQueueFlags(fs *flag.FlagSet) queueFlags {
	def := os.Getenv("OWED_QUEUE_NAME")
	if def == "" {
		def = rest.DefaultQueueName
	}
	return queueFlags{
		fs:   fs,
		name: fs.String("queue", def, "REST queue name ($OWED_QUEUE_NAME); other backends name theirs in their own variables"),
		json: fs.Bool("json", false, "print JSON instead of a table"),
	}
}

// config reads the queue configuration from the environment and applies
// --queue; call it after parsing.
func (f queueFlags) config() (backends.Config, error) {
	cfg, err := backends.LoadConfig()
	if err != nil {
		return cfg, usageError{err.Error()}
	}
	named := false
	f.fs.Visit(func(fl *flag.Flag) { named = named || fl.Name == "queue" })
	switch {
	case cfg.Backend == backends.REST:
		cfg.Rest.Name = *f.name
	case named:
		return cfg, usageError{fmt.Sprintf("--queue names a REST queue; with OWED_QUEUE_BACKEND=%s the queue is in its own variables (see docs/queues.md)", cfg.Backend)}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err.Error()}
	}
	return cfg, nil
}

// open connects to the configured queue; target names it in output.
func (f queueFlags) open(ctx context.Context) (q queue.Queue, target string, err error) {
	cfg, err := f.config()
	if err != nil {
		return nil, "", err
	}
	q, err = backends.Open(ctx, cfg, zerolog.Nop())
	return q, cfg.Target(), err
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`dlq redrive 12 13 --json`) and returns the
// positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// dlqActions are dlq's actions, which share one set of flags.
var dlqActions = []string{"depth", "list", "show", "redrive", "delete"}

const dlqExample = "OWED_QUEUE_URL=http://127.0.0.1:8181 OWED_QUEUE_TOKEN=dev-token owedctl dlq list --limit 20"

// dlqCmd inspects, redrives and deletes the configured queue's dead letters.
func dlqCmd(ctx context.Context, args []string) error { return runDLQ(ctx, os.Stdout, args) }

// runDLQ is dlqCmd writing to out, so tests read what an operator sees.
func runDLQ(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl dlq depth|list|show ID|redrive [ID…|--all]|delete ID… [--queue NAME] [--json]\n\n"+
		"  depth     how many dead letters the queue holds\n"+
		"  list      dead letters (--limit, --cursor, --all-pages)\n"+
		"  show ID   one dead letter with its body\n"+
		"  redrive   reopen the failed rows of these dead letters in the ledger (--all: every one,\n"+
		"            or with --tenant, --kind, --reason, --older-than every one they match);\n"+
		"            the next sweep publishes them afresh and their dead letters are removed\n"+
		"  delete    remove dead letters for good\n\n"+
		"The queue is OWED_QUEUE_BACKEND (rest, sqs or jetstream) and its variables: for rest\n"+
		"OWED_QUEUE_URL, OWED_QUEUE_TOKEN and OWED_QUEUE_NAME (see docs/queues.md for the others).\n"+
		"redrive needs the database too (--database-url or OWED_DATABASE_URL): only a row the\n"+
		"ledger reopens is sent again, so a stray copy of a failed row's message never is.\n\nexample:\n  "+dlqExample+"\n"),
		dlqActions); err != nil {
		return err
	}
	action, tail := args[0], args[1:]
	fs := newFlags("dlq "+action, "dlq "+action+" [flags]", dlqExample)
	qf := addQueueFlags(fs)
	limit := fs.Int("limit", 50, "list: dead letters per page")
	cursor := fs.String("cursor", "", "list: start at this cursor (next_cursor of the previous page)")
	allPages := fs.Bool("all-pages", false, "list: follow cursors to the end")
	redriveAll := fs.Bool("all", false, "redrive: every dead letter of the queue")
	force := fs.Bool("force", false, "redrive: reopen rows whose last attempt failed permanently too (a bounced recipient, a refused message); needs --why")
	audit := addAuditFlagsAs(fs, "why", "redrive, delete: why, for the audit trail (required with --force)")
	dbURL := operatorLogin.flag(fs, "redrive, delete: the owed database, where the failed rows are reopened and the audit line written")
	var ff ops.DeadLetterFilter
	fs.StringVar(&ff.Tenant, "tenant", "", "redrive --all: only dead letters of this tenant's rows")
	fs.StringVar(&ff.Kind, "kind", "", "redrive --all: only dead letters of rows of this kind")
	fs.StringVar(&ff.Reason, "reason", "", "redrive --all: only dead letters whose reason contains this (any case)")
	fs.DurationVar(&ff.OlderThan, "older-than", 0, "redrive --all: only dead letters at least this old, e.g. 10m")
	pos, err := parseInterleaved(fs, tail)
	if err != nil {
		return err
	}
	if err := checkDLQArgs(action, pos, *redriveAll, *limit); err != nil {
		return err
	}
	if !ff.Empty() && (action != "redrive" || !*redriveAll) {
		return usageError{"--tenant, --kind, --reason and --older-than narrow redrive --all"}
	}
	if *force && (action != "redrive" || *audit.reason == "") {
		return usageError{"--force: redrive only, with --why saying what was fixed since the row failed permanently"}
	}
	var by ledger.OperatorAction
	if action == "redrive" || action == "delete" {
		who, err := audit.operatorName()
		if err != nil {
			return err
		}
		by = ledger.OperatorAction{Operator: who, Target: ops.DeadLetterTarget(pos, ff), Reason: *audit.reason}
	}
	q, target, err := qf.open(ctx)
	if err != nil {
		return err
	}
	defer q.Close()
	switch action {
	case "depth":
		st, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(out, map[string]any{"queue": target, "dead_letter_depth": st.DeadLetterDepth})
		}
		fmt.Fprintf(out, "%s: %d dead letters\n", target, st.DeadLetterDepth)
	case "list":
		list, next, err := ops.ListDeadLetters(ctx, q, *limit, *cursor, *allPages)
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(out, deadLetterPage{ops.Views(list), next})
		}
		return printDeadLetters(out, list, next)
	case "show":
		list, _, err := ops.ListDeadLetters(ctx, q, ops.DeadLetterPageMax, "", true)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list, func(d queue.DeadLetter) bool { return d.ID == pos[0] })
		if i < 0 {
			return fmt.Errorf("%s is not a dead letter of %s", pos[0], target)
		}
		if *qf.json {
			return printJSON(out, ops.View(list[i]))
		}
		return printDeadLetter(out, list[i])
	case "redrive":
		l, closeDB, err := openLedger(operatorLogin.url(*dbURL))
		if err != nil {
			return err
		}
		defer closeDB()
		if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
			return err
		}
		// The filter is the console's (ops.FindDeadLetters); empty, it
		// keeps every dead letter.
		found, err := ops.FindDeadLetters(ctx, q, l, ff, clock.Real().Now())
		if err != nil {
			return err
		}
		list, missing := ops.SelectDeadLetters(ops.Plain(found), pos, *redriveAll, target)
		res, err := ops.RedriveDeadLetters(ctx, q, l, list, by, *force)
		if err != nil {
			return operatorLogin.hint(err)
		}
		res.Kept = append(res.Kept, missing...)
		if *qf.json {
			return printJSON(out, res)
		}
		fmt.Fprintf(out, "redrove %d dead letters of %s: their rows are pending again and the next sweep publishes them\n",
			res.Redriven, target)
		permanent := false
		for _, k := range res.Kept {
			fmt.Fprintf(out, "  kept %s: %s\n", k.DeadLetter, k.Reason)
			permanent = permanent || k.Permanent
		}
		if permanent {
			fmt.Fprintln(out, "a row that failed permanently fails the same way when sent again: fix the cause, then redrive it with --force --why TEXT")
		}
	case "delete":
		l, closeDB, err := openLedger(operatorLogin.url(*dbURL))
		if err != nil {
			return err
		}
		defer closeDB()
		if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
			return err
		}
		all, _, err := ops.ListDeadLetters(ctx, q, ops.DeadLetterPageMax, "", true)
		if err != nil {
			return err
		}
		list, missing := ops.SelectDeadLetters(all, pos, false, target)
		n, err := ops.DeleteDeadLetters(ctx, q, l, list, by)
		if err != nil {
			return operatorLogin.hint(err)
		}
		if *qf.json {
			return printJSON(out, map[string]any{"deleted": n, "kept": missing})
		}
		fmt.Fprintf(out, "deleted %d of %d dead letters\n", n, len(pos))
		for _, k := range missing {
			fmt.Fprintf(out, "  kept %s: %s\n", k.DeadLetter, k.Reason)
		}
	}
	return nil
}

// checkDLQArgs refuses a dlq command's wrong arguments before the queue is
// opened: a dead-letter id must be in the form dlq list prints (dl_49).
func checkDLQArgs(action string, pos []string, all bool, limit int) error {
	for _, id := range pos {
		if _, err := ops.ParseDeadLetterID(id); err != nil {
			return usageError{err.Error()}
		}
	}
	switch action {
	case "depth", "list":
		if len(pos) > 0 {
			return usageError{action + " takes no arguments; use show ID for one dead letter"}
		}
		if limit < 1 {
			return usageError{fmt.Sprintf("--limit=%d must be at least 1", limit)}
		}
	case "show":
		if len(pos) != 1 {
			return usageError{"show takes exactly one dead-letter id"}
		}
	case "redrive":
		if all == (len(pos) > 0) {
			return usageError{"redrive takes dead-letter ids or --all, not both or neither"}
		}
	case "delete":
		if len(pos) == 0 {
			return usageError{"delete takes one or more dead-letter ids"}
		}
	}
	return nil
}

// deadLetterPage is `dlq list --json`: next_cursor is absent on the last
// page, so a script loops while it is there.
type deadLetterPage struct {
	DeadLetters []ops.DeadLetterView `json:"dead_letters"`
	NextCursor  string               `json:"next_cursor,omitempty"`
}

// reasonWidth keeps the list table on one line per dead letter.
const reasonWidth = 60

func printDeadLetters(out io.Writer, list []queue.DeadLetter, next string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tDEAD-LETTERED\tKEY\tREASON")
	for _, d := range list {
		reason := strings.ReplaceAll(d.Reason, "\n", " ")
		if len(reason) > reasonWidth {
			reason = reason[:reasonWidth-1] + "…"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", d.ID, d.DeadLetteredAt.Format(time.RFC3339), d.Key, reason)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(out, "more: owedctl dlq list --cursor %s\n", next)
	}
	return nil
}

func printDeadLetter(out io.Writer, d queue.DeadLetter) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\n", d.ID)
	fmt.Fprintf(w, "key\t%s\n", d.Key)
	fmt.Fprintf(w, "dead-lettered at\t%s\n", d.DeadLetteredAt.Format(time.RFC3339))
	fmt.Fprintf(w, "reason\t%s\n", d.Reason)
	if err := w.Flush(); err != nil {
		return err
	}
	body := d.Body
	var pretty bytes.Buffer
	if json.Indent(&pretty, d.Body, "", "  ") == nil {
		body = pretty.Bytes()
	}
	fmt.Fprintf(out, "body:\n%s\n", body)
	return nil
}
