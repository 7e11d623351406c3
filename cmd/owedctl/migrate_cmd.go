package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/owedhq/owed/internal/migrate"
)

func migrateCmd(ctx context.Context, args []string) error {
	fs := newFlags("migrate", "migrate up|down|status [--database-url URL]",
		"OWED_DATABASE_URL=postgres://owed_owner@db/owed owedctl migrate up")
	dbURL := databaseFlag(fs, "database to migrate, as the role that owns the schema")
	if err := needAction(args, fs.Usage, "missing action: one of up, down, status"); err != nil {
		return err
	}
	action := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
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
	case "status":
		st, err := migrate.Status(ctx, db)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "VERSION\tSTATE\tFILE")
		for _, m := range st {
			state := "pending"
			if m.Applied {
				state = "applied"
			}
			fmt.Fprintf(w, "%05d\t%s\t%s\n", m.Version, state, m.Name)
		}
		w.Flush()
	default:
		return usageError{fmt.Sprintf("unknown action %q: one of up, down, status", action)}
	}
	return nil
}
