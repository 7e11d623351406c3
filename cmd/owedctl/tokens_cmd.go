package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/owedhq/owed/internal/api"
)

// tokensCmd creates, lists and revokes tenant API tokens. A token's plaintext
// is printed once, by create, to stdout alone (so a script can capture it);
// list never shows it, and revoke takes the id or, for a leaked token whose
// id nobody knows, the token itself. It connects as a member of
// owed_token_admin (owed_admin in the local stacks), the one role that may
// write owed_api_tokens: the services' role may not (docs/security.md).
func tokensCmd(ctx context.Context, args []string) error {
	if err := needAction(args, printUsage("usage: owedctl tokens create|list|revoke [flags]\n\n"+
		"  create --tenant T [--name N]    a token for the tenant, printed once to stdout\n"+
		"  list --tenant T                 the tenant's tokens: id, name, created, last used, revoked\n"+
		"  revoke ID | --token TOKEN|-     revoke by id, or by the token itself (- reads it from stdin)\n\n"+
		"Each takes --database-url, else "+tokenAdminLogin.variable+", else OWED_DATABASE_URL: a login in\n"+
		"owed_token_admin (owed_admin in the local stacks); the services' role may not touch tokens.\n"+
		"create and revoke write a line of the operators' audit trail: --operator (default the OS\n"+
		"user) and --reason.\n"+
		"'owedctl tokens ACTION --help' lists an action's flags.\n\n"+
		"example:\n  owedctl tokens create --tenant acme --name 'billing backend'\n"),
		tokensActions); err != nil {
		return err
	}
	switch args[0] {
	case "create":
		return tokensCreate(ctx, args[1:])
	case "list":
		return tokensList(ctx, args[1:])
	}
	return tokensRevoke(ctx, args[1:])
}

// tokensActions are tokens' actions.
var tokensActions = []string{"create", "list", "revoke"}

// tokensDatabaseFlag registers --database-url for tokens' actions.
func tokensDatabaseFlag(fs *flag.FlagSet) *string {
	return tokenAdminLogin.flag(fs, "database holding owed_api_tokens; the services' role may not touch tokens")
}

func openTokens(dbURL string) (*api.Tokens, func(), error) {
	return openWith(tokenAdminLogin.url(dbURL), func(db *sql.DB) *api.Tokens { return api.NewTokens(db, nil) })
}

// auditedTokens opens the token store writing its audit lines as the
// operator --operator names, with --reason.
func auditedTokens(audit auditFlags, dbURL string) (*api.Tokens, func(), error) {
	who, err := audit.operatorName()
	if err != nil {
		return nil, nil, err
	}
	tokens, done, err := openTokens(dbURL)
	if err != nil {
		return nil, nil, err
	}
	return tokens.As(who, *audit.reason), done, nil
}

// parseTenantFlags parses the flags of an action that takes flags alone,
// one of them --tenant (required).
func parseTenantFlags(fs *flag.FlagSet, args []string, tenant *string) error {
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	if *tenant == "" {
		return usageError{"--tenant is required"}
	}
	return nil
}

func tokensCreate(ctx context.Context, args []string) error {
	fs := newFlags("tokens create", "tokens create --tenant T [--name N] [--reason TEXT] [--operator NAME] [--database-url URL]",
		"TOKEN=$(owedctl tokens create --tenant acme --name 'billing backend')")
	tenant := fs.String("tenant", "", "tenant the token acts for (required)")
	name := fs.String("name", "", "label saying who holds the token, shown by list")
	audit := addAuditFlags(fs, "why, for the audit trail (optional)")
	dbURL := tokensDatabaseFlag(fs)
	if err := parseTenantFlags(fs, args, tenant); err != nil {
		return err
	}
	tokens, done, err := auditedTokens(audit, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	if err := checkWrites(ctx, tokenAdminLogin.url(*dbURL)); err != nil {
		return err
	}
	plain, id, err := tokens.Create(ctx, *tenant, *name)
	if err != nil {
		return tokenAdminLogin.hint(err)
	}
	fmt.Fprintf(os.Stderr, "created token %d for tenant %q; it is shown once, below: store it now\n", id, *tenant)
	fmt.Println(plain)
	return nil
}

func tokensList(ctx context.Context, args []string) error {
	fs := newFlags("tokens list", "tokens list --tenant T [--database-url URL]",
		"owedctl tokens list --tenant acme")
	tenant := fs.String("tenant", "", "tenant whose tokens to list (required)")
	dbURL := tokensDatabaseFlag(fs)
	if err := parseTenantFlags(fs, args, tenant); err != nil {
		return err
	}
	tokens, done, err := openTokens(*dbURL)
	if err != nil {
		return err
	}
	defer done()
	list, err := tokens.List(ctx, *tenant)
	if err != nil {
		return tokenAdminLogin.hint(err)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tCREATED\tLAST USED\tREVOKED")
	for _, t := range list {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339),
			timeOrDash(t.LastUsedAt), timeOrDash(t.RevokedAt))
	}
	return w.Flush()
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func tokensRevoke(ctx context.Context, args []string) error {
	fs := newFlags("tokens revoke", "tokens revoke ID | --token TOKEN|- [--reason TEXT] [--operator NAME] [--database-url URL]",
		"owedctl tokens revoke 12   (or: echo \"$LEAKED\" | owedctl tokens revoke --token -)")
	token := fs.String("token", "", "revoke by the token itself; - reads it from stdin, "+
		"which keeps it out of the shell history and the process list")
	audit := addAuditFlags(fs, "why, for the audit trail (optional)")
	dbURL := tokensDatabaseFlag(fs)
	// An id may come before or after the flags.
	var idArg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		idArg, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if idArg == "" && len(rest) > 0 {
		idArg, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q: give one token id", rest[0])}
	}
	if (idArg == "") == (*token == "") {
		return usageError{"give a token id or --token, exactly one"}
	}
	var id int64
	if idArg != "" {
		var err error
		if id, err = strconv.ParseInt(idArg, 10, 64); err != nil || id < 1 {
			return usageError{fmt.Sprintf("token id %q is not a positive integer (see owedctl tokens list)", idArg)}
		}
	}
	if *token == "-" {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			return fmt.Errorf("read the token from stdin: %w", err)
		}
		*token = strings.TrimSpace(line)
	}
	tokens, done, err := auditedTokens(audit, *dbURL)
	if err != nil {
		return err
	}
	defer done()
	if err := checkWrites(ctx, tokenAdminLogin.url(*dbURL)); err != nil {
		return err
	}
	var t api.Token
	if id != 0 {
		t, err = tokens.Revoke(ctx, id)
	} else {
		t, err = tokens.RevokeToken(ctx, *token)
	}
	if errors.Is(err, api.ErrTokenNotFound) {
		// The error never repeats a token given on the command line.
		return errors.New("no such token")
	}
	if err != nil {
		return tokenAdminLogin.hint(err)
	}
	fmt.Printf("revoked token %d (tenant %q, name %q) at %s\n", t.ID, t.Tenant, t.Name, t.RevokedAt.Format(time.RFC3339))
	return nil
}
