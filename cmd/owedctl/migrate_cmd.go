package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/owedhq/owed/internal/migrate"
)

// migrateActions are migrate's actions, which share its one flag.
var migrateActions = []string{"up", "down", "down-to", "status"}

func migrateCmd(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "migrate up|down|down-to VERSION|status [--database-url URL]",
		"OWED_DATABASE_URL=postgres://owed_owner@db/owed owedctl migrate up\n"+
			"  owedctl migrate down-to 27   # roll back to the schema of the build whose newest migration is 00027\n\n"+
			"The migration that partitions the ledger by month runs under a serving release in four steps;\n"+
			"the one exclusive lock (the swap) lasts milliseconds once taken, and waits for open transactions\n"+
			"on the ledger: statements queue behind it, none fails. Steps, locks and the rollback: docs/upgrade.md.")
	dbURL := databaseFlag(fs, "database to migrate, as the role that owns the schema")
	if err := needAction(args, fs.Usage, migrateActions); err != nil {
		return err
	}
	action, rest := args[0], args[1:]
	var target int64
	if action == "down-to" && (len(rest) == 0 || !isHelp(rest[0])) {
		if len(rest) == 0 {
			return usageError{"down-to needs a schema version: owedctl migrate down-to 27"}
		}
		v, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil || v < 0 {
			return usageError{fmt.Sprintf("down-to %q: want a schema version, a number such as 27", rest[0])}
		}
		target, rest = v, rest[1:]
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	db, err := openDatabase(*dbURL)
	if err != nil {
		return err
	}
	defer db.Close()

	switch action {
	case "up":
		applied, err := migrate.Up(ctx, db)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Println("already at head; nothing applied")
		}
		for _, v := range applied {
			fmt.Printf("applied %05d\n", v)
		}
	case "down":
		v, err := migrate.Down(ctx, db)
		if err != nil {
			return err
		}
		fmt.Printf("rolled back %05d\n", v)
	case "down-to":
		done, err := migrate.DownTo(ctx, db, target)
		if err != nil {
			return err
		}
		if len(done) == 0 {
			fmt.Printf("already at or below %05d; nothing rolled back\n", target)
		}
		for _, v := range done {
			fmt.Printf("rolled back %05d\n", v)
		}
	case "status":
		return migrateStatus(ctx, db)
	}
	return nil
}

// migrateStatus prints the compatibility range, then every migration.
func migrateStatus(ctx context.Context, db *sql.DB) error {
	c, err := migrate.CheckThis(ctx, db)
	if err != nil {
		return err
	}
	st, err := migrate.Status(ctx, db)
	if err != nil {
		return err
	}
	if c.Requires > 0 {
		fmt.Printf("database schema %05d; binaries of schema ≥ %05d may run on it\n", c.Schema, c.Requires)
	} else {
		fmt.Printf("database schema %05d; none of its migrations breaks an older binary (no owed:breaks-before)\n", c.Schema)
	}
	fmt.Printf("this build is %05d and runs on schemas %05d to %05d and newer ones that allow it\n",
		c.Build.Head, c.Build.Oldest, c.Build.Head)
	if err := c.Err(); err != nil {
		fmt.Println("this build cannot run on it:", err)
	} else {
		fmt.Println("this build can run on it")
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tSTATE\tBREAKS BEFORE\tFILE")
	for _, m := range st {
		state, breaks := "pending", "-"
		if m.Applied {
			state = "applied"
		}
		if m.BreaksBefore > 0 {
			breaks = fmt.Sprintf("%05d", m.BreaksBefore)
		}
		fmt.Fprintf(w, "%05d\t%s\t%s\t%s\n", m.Version, state, breaks, m.Name)
	}
	return w.Flush()
}
