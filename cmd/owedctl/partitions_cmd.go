package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/owedhq/owed/internal/archive"
)

// partitionsActions are partitions' actions.
var partitionsActions = []string{"ensure", "list"}

const partitionsExample = "owedctl partitions ensure --ahead 2"

// partitionsCmd keeps and lists the ledger's month partitions
// (owed_ledger_partitions_ensure, internal/ledger/sql/notifications.sql).
// It connects as the schema's owner, as migrate does: creating a
// partition takes the table's ownership.
func partitionsCmd(ctx context.Context, args []string) error {
	return runPartitions(ctx, os.Stdout, args, time.Now())
}

// runPartitions is partitionsCmd writing to out, at now.
func runPartitions(ctx context.Context, out io.Writer, args []string, now time.Time) error {
	if err := needAction(args, printUsage("usage: owedctl partitions ensure [--ahead N] | list\n\n"+
		"  ensure   create this month's partition of the ledger and the next N months' that are missing,\n"+
		"           and move the ids to this month's range (run it monthly, before each month starts;\n"+
		"           a month it misses keeps its rows in the month before, never fails an insert)\n"+
		"  list     the partitions, their id ranges, estimated rows and size\n\n"+
		"The database is --database-url or OWED_DATABASE_URL, as the schema's owner (docs/scale.md).\n\nexample:\n  "+
		partitionsExample+"\n"), partitionsActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("partitions "+action, "partitions "+action+" [--ahead N] [--json] [--database-url URL]", partitionsExample)
	ahead := fs.Int("ahead", 1, fmt.Sprintf("ensure: the months after this one to create (0 to %d)", archive.MaxAhead))
	asJSON := fs.Bool("json", false, "print the partitions as JSON")
	dbURL := databaseFlag(fs, "the owed database, as the schema's owner")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	if *ahead < 0 || *ahead > archive.MaxAhead {
		return usageError{fmt.Sprintf("--ahead %d: want 0 to %d months", *ahead, archive.MaxAhead)}
	}
	if action == "ensure" {
		if err := checkWrites(ctx, *dbURL); err != nil {
			return err
		}
	}
	db, err := openDatabase(*dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	var parts []archive.Partition
	if action == "ensure" {
		parts, err = archive.EnsurePartitions(ctx, db, now, *ahead)
	} else {
		parts, err = archive.Partitions(ctx, db)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, parts)
	}
	for _, p := range parts {
		from := fmt.Sprint(p.From)
		if p.From == 0 {
			from = "(lowest)"
		}
		switch {
		case action == "list":
			fmt.Fprintf(out, "%-32s ids [%s, %d)  about %d rows, %d bytes\n", p.Name, from, p.To, p.Rows, p.Bytes)
		case p.Created:
			fmt.Fprintf(out, "%-32s ids [%s, %d)  created\n", p.Name, from, p.To)
		default:
			fmt.Fprintf(out, "%-32s ids [%s, %d)  there already\n", p.Name, from, p.To)
		}
	}
	return nil
}
