package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/owedhq/owed/internal/queue/rest"
)

// queueFlags are the flags every command talking to the queue shares. The
// URL and token come only from OWED_QUEUE_URL and OWED_QUEUE_TOKEN, so the
// token never shows in a process list or shell history.
type queueFlags struct {
	name *string
	json *bool
}

func addQueueFlags(fs *flag.FlagSet) queueFlags {
	def := os.Getenv("OWED_QUEUE_NAME")
	if def == "" {
		def = rest.DefaultQueueName
	}
	return queueFlags{
		name: fs.String("queue", def, "queue name ($OWED_QUEUE_NAME)"),
		json: fs.Bool("json", false, "print JSON instead of a table"),
	}
}

func (f queueFlags) client() (*rest.Client, error) {
	var cfg rest.Config
	if err := envconfig.Process("OWED", &cfg); err != nil {
		return nil, usageError{err.Error()}
	}
	cfg.Name = *f.name
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err.Error()}
	}
	return rest.New(cfg)
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

const dlqExample = "OWED_QUEUE_URL=http://127.0.0.1:8181 OWED_QUEUE_TOKEN=dev-token owedctl dlq list --limit 20"

// dlqCmd inspects, redrives and deletes the configured queue's dead letters.
func dlqCmd(ctx context.Context, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl dlq depth|list|show ID|redrive [ID…|--all]|delete ID… [--queue NAME] [--json]\n\n"+
		"  depth     how many dead letters the queue holds\n"+
		"  list      dead letters, oldest first (--limit, --cursor, --all-pages)\n"+
		"  show ID   one dead letter with its payload\n"+
		"  redrive   put dead letters back on the queue with their receive count reset\n"+
		"  delete    remove dead letters for good\n\n"+
		"The queue is OWED_QUEUE_URL, OWED_QUEUE_TOKEN and OWED_QUEUE_NAME.\n\nexample:\n  "+dlqExample+"\n"),
		"missing action: one of depth, list, show, redrive, delete"); err != nil {
		return err
	}
	action, tail := args[0], args[1:]
	fs := newFlags("dlq "+action, "dlq "+action+" [flags]", dlqExample)
	qf := addQueueFlags(fs)
	limit := fs.Int("limit", 50, "list: dead letters per page (1..100)")
	cursor := fs.String("cursor", "", "list: start after this cursor (next_cursor of the previous page)")
	allPages := fs.Bool("all-pages", false, "list: follow cursors to the end")
	all := fs.Bool("all", false, "redrive: every dead letter of the queue")
	pos, err := parseInterleaved(fs, tail)
	if err != nil {
		return err
	}
	c, err := qf.client()
	if err != nil {
		return err
	}
	switch action {
	case "depth":
		if len(pos) > 0 {
			return usageError{"depth takes no arguments"}
		}
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(os.Stdout, map[string]any{"queue": c.Queue(), "dead_letter_depth": st.DeadLetterDepth})
		}
		fmt.Printf("%s: %d dead letters\n", c.Queue(), st.DeadLetterDepth)
	case "list":
		if len(pos) > 0 {
			return usageError{"list takes no arguments; use show ID for one dead letter"}
		}
		var list []rest.DeadLetter
		next := *cursor
		for {
			page, err := c.DeadLetters(ctx, rest.DeadLetterQuery{Limit: *limit, Cursor: next})
			if err != nil {
				return err
			}
			list, next = append(list, page.DeadLetters...), page.NextCursor
			if !*allPages || next == "" {
				break
			}
		}
		if *qf.json {
			return printJSON(os.Stdout, map[string]any{"dead_letters": list, "next_cursor": next})
		}
		return printDeadLetters(list, next)
	case "show":
		if len(pos) != 1 {
			return usageError{"show takes exactly one message id"}
		}
		d, err := c.DeadLetter(ctx, pos[0])
		var apiErr *rest.APIError
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			return fmt.Errorf("message %s is not a dead letter of queue %s", pos[0], c.Queue())
		}
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(os.Stdout, d)
		}
		return printDeadLetter(d)
	case "redrive":
		if *all == (len(pos) > 0) {
			return usageError{"redrive takes message ids or --all, not both or neither"}
		}
		var n int
		if *all {
			n, err = c.RedriveAll(ctx)
		} else {
			n, err = c.Redrive(ctx, pos...)
		}
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(os.Stdout, map[string]any{"redriven": n})
		}
		fmt.Printf("redrove %d dead letters to %s\n", n, c.Queue())
	case "delete":
		if len(pos) == 0 {
			return usageError{"delete takes one or more message ids"}
		}
		n, err := c.DeleteDeadLetters(ctx, pos...)
		if err != nil {
			return err
		}
		if *qf.json {
			return printJSON(os.Stdout, map[string]any{"deleted": n})
		}
		fmt.Printf("deleted %d of %d dead letters\n", n, len(pos))
	default:
		return usageError{fmt.Sprintf("unknown action %q: one of depth, list, show, redrive, delete", action)}
	}
	return nil
}

// lastErrorWidth keeps the list table on one line per dead letter.
const lastErrorWidth = 60

func printDeadLetters(list []rest.DeadLetter, next string) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tRECEIVES\tDEAD-LETTERED\tKEY\tLAST ERROR")
	for _, d := range list {
		last := strings.ReplaceAll(d.LastError, "\n", " ")
		if len(last) > lastErrorWidth {
			last = last[:lastErrorWidth-1] + "…"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", d.MessageID, d.ReceiveCount, d.DeadLetteredAt.Format(time.RFC3339), d.IdempotencyKey, last)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Printf("more: owedctl dlq list --cursor %s\n", next)
	}
	return nil
}

func printDeadLetter(d rest.DeadLetter) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\n", d.MessageID)
	fmt.Fprintf(w, "idempotency key\t%s\n", d.IdempotencyKey)
	fmt.Fprintf(w, "receive count\t%d\n", d.ReceiveCount)
	fmt.Fprintf(w, "published at\t%s\n", d.PublishedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "dead-lettered at\t%s\n", d.DeadLetteredAt.Format(time.RFC3339))
	fmt.Fprintf(w, "last error\t%s\n", d.LastError)
	if err := w.Flush(); err != nil {
		return err
	}
	var pretty json.RawMessage
	if b, err := json.MarshalIndent(d.Payload, "", "  "); err == nil {
		pretty = b
	} else {
		pretty = d.Payload
	}
	fmt.Printf("payload:\n%s\n", pretty)
	return nil
}
