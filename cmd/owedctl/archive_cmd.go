package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/owedhq/owed/internal/archive"
)

// archiveActions are archive's actions.
var archiveActions = []string{"write", "restore"}

const archiveExample = "owedctl archive write --from-id 1 --to-id 4000000 --out /archive/owed-2026-01"

// archiveCmd writes a settled range of the ledger to files and restores
// them (internal/archive). It connects as the schema's owner, as migrate
// does: an archive spans every tenant.
func archiveCmd(ctx context.Context, args []string) error {
	return runArchive(ctx, os.Stdout, args)
}

// runArchive is archiveCmd writing to out.
func runArchive(ctx context.Context, out io.Writer, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl archive write --from-id A --to-id B --out DIR | restore --dir DIR\n\n"+
		"  write     the settled rows of ids [A, B), their attempts, receipts and shared payloads, to gzipped JSON lines\n"+
		"            with manifest.json and SHA256SUMS (zcat FILE | jq reads them; sha256sum -c SHA256SUMS checks them)\n"+
		"  restore   check every file against the manifest, then write the rows back with their ids, and a line on the\n"+
		"            operators' audit trail (who, the range, the rows restored, why)\n\n"+
		"The database is --database-url or OWED_DATABASE_URL, as the schema's owner (docs/scale.md).\n\nexample:\n  "+
		archiveExample+"\n"), archiveActions); err != nil {
		return err
	}
	action := args[0]
	fs := newFlags("archive "+action, "archive "+action+" [--from-id A --to-id B --out DIR | --dir DIR --reason TEXT [--operator NAME]] "+
		"[--json] [--database-url URL]", archiveExample)
	from := fs.Int64("from-id", 0, "write: the first id of the range")
	to := fs.Int64("to-id", 0, "write: the id after the range's last")
	outDir := fs.String("out", "", "write: a new or empty folder for the archive")
	dir := fs.String("dir", "", "restore: the archive's folder")
	audit := addAuditFlags(fs, "restore: why (the request's reference), recorded on the operators' audit trail")
	asJSON := fs.Bool("json", false, "print the manifest or the counts as JSON")
	dbURL := databaseFlag(fs, "the owed database, as the schema's owner")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case action == "write" && (*from < 1 || *to <= *from || *outDir == ""):
		return usageError{fmt.Sprintf("write: give --from-id (at least 1), --to-id (above it) and --out; got %d, %d, %q",
			*from, *to, *outDir)}
	case action == "restore" && *dir == "":
		return usageError{"restore: give --dir, the archive's folder"}
	case action == "restore" && *audit.reason == "":
		return usageError{"restore: --reason: say why (the request's reference); the operators' audit trail records it"}
	}
	var by archive.Operator
	if action == "restore" {
		name, err := audit.operatorName()
		if err != nil {
			return err
		}
		by = archive.Operator{Name: name, Reason: *audit.reason}
		if err := checkWrites(ctx, *dbURL); err != nil {
			return err
		}
	}
	db, err := openDatabase(*dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	var result any
	start := time.Now()
	if action == "write" {
		m, err := archive.Write(ctx, db, *from, *to, *outDir, start)
		if err != nil {
			return err
		}
		result = m
		if !*asJSON {
			var rows, bytes int64
			for _, f := range m.Files {
				fmt.Fprintf(out, "%-34s %10d rows %12d bytes  sha256 %s\n", f.Name, f.Rows, f.Bytes, f.SHA256)
				rows, bytes = rows+f.Rows, bytes+f.Bytes
			}
			secs := time.Since(start).Seconds()
			fmt.Fprintf(out, "archived ids [%d, %d) into %s: %d rows, %d bytes in %.1f s (%.0f rows/s)\n", *from, *to,
				*outDir, rows, bytes, secs, float64(rows)/secs)
			return nil
		}
	} else {
		res, err := archive.Restore(ctx, db, *dir, by)
		if err != nil {
			return err
		}
		result = res
		if !*asJSON {
			for _, t := range []string{"owed_event_payloads", "owed_notifications", "owed_notification_attempts", "owed_receipts"} {
				fmt.Fprintf(out, "%-28s %10d rows restored\n", t, res.Rows[t])
			}
			fmt.Fprintf(out, "%d rows erased since the archive was written came back as tombstones\n", res.Erased)
			return nil
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(result)
}
