package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/owedhq/owed/internal/archive"
	"github.com/owedhq/owed/internal/config"
)

// retentionActions are retention's actions.
var retentionActions = []string{"run"}

const retentionExample = "owedctl retention run --archive-dir /archive/owed --operator alice"

// retentionCmd archives and drops the ledger's months past their
// retention (internal/archive, retention.go). It connects as the schema's
// owner, as archive does: a month spans every tenant, and dropping a
// partition takes the table's ownership.
func retentionCmd(ctx context.Context, args []string) error {
	return runRetention(ctx, os.Stdout, args, time.Now())
}

// runRetention is retentionCmd writing to out, at now.
func runRetention(ctx context.Context, out io.Writer, args []string, now time.Time) error {
	if err := needAction(args, printUsage("usage: owedctl retention run --archive-dir DIR --operator NAME [--dry-run] [--json]\n\n"+
		"  run   detach, archive, check and drop each month of the ledger whose rows are all settled and older\n"+
		"        than the retention of every tenant with rows in it (OWED_RETENTION, default 400d;\n"+
		"        OWED_RETENTION_TENANTS, e.g. \"acme:800d;trial-co:30d\"), none of them under a hold\n"+
		"        (owedctl hold); each month kept says why. --dry-run only says what it would drop.\n\n"+
		"The database is --database-url or OWED_DATABASE_URL, as the schema's owner (docs/scale.md).\n\nexample:\n  "+
		retentionExample+"\n"), retentionActions); err != nil {
		return err
	}
	fs := newFlags("retention run", "retention run --archive-dir DIR --operator NAME [--dry-run] [--json] [--database-url URL]",
		retentionExample)
	dir := fs.String("archive-dir", "", "the folder each dropped month's archive is written into, one folder per month")
	operator := fs.String("operator", "", "who runs it, for the operators' trail (owed_operator_audit)")
	dryRun := fs.Bool("dry-run", false, "say what would be dropped and why the rest stays; drop nothing")
	asJSON := fs.Bool("json", false, "print each month's decision as JSON")
	dbURL := databaseFlag(fs, "the owed database, as the schema's owner")
	if err := parseOnlyFlags(fs, args[1:], ""); err != nil {
		return err
	}
	switch {
	case *operator == "":
		return usageError{"run: give --operator, who runs it: each drop is on the operators' trail"}
	case *dir == "" && !*dryRun:
		return usageError{"run: give --archive-dir: a month is dropped only after its archive is written there"}
	}
	var ret archive.Retention
	if err := config.Process("OWED", &ret); err != nil {
		return err
	}
	if !*dryRun {
		if err := checkWrites(ctx, *dbURL); err != nil {
			return err
		}
	}
	db, err := openDatabase(*dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	months, err := archive.Run(ctx, db, archive.RunOptions{Retention: ret, Dir: *dir, DryRun: *dryRun,
		Operator: *operator, Now: now})
	if *asJSON {
		if perr := printJSON(out, months); perr != nil {
			return perr
		}
		return err
	}
	for _, m := range months {
		switch {
		case m.Dropped:
			fmt.Fprintf(out, "%-32s dropped: detached in %.3f s, %d rows archived in %s (%d rows, %d bytes in %.2f s), "+
				"dropped %.3f s after, its schedule keys deleted in %.3f s\n", m.Partition, m.DetachTime.Seconds(), m.Rows,
				m.Archive, m.ArchiveRows, m.ArchiveSize, m.ArchiveTime.Seconds(), m.DropTime.Seconds(), m.KeysTime.Seconds())
		case m.Drop:
			fmt.Fprintf(out, "%-32s would be dropped: %d rows, all settled and past their retention\n", m.Partition, m.Rows)
		default:
			fmt.Fprintf(out, "%-32s kept: %s\n", m.Partition, m.Kept)
		}
	}
	if len(months) == 0 && err == nil {
		fmt.Fprintln(out, "no month before the current one: nothing to drop")
	}
	return err
}
