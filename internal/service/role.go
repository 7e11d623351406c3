package service

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/sqlfile"
)

// InsecureRoleVariable is the development-only escape hatch of CheckRole.
const InsecureRoleVariable = "OWED_ALLOW_INSECURE_DATABASE_ROLE"

// queriesSQL holds qRole: what, for the session's role, would make
// row-level security a no-op for it (sql/queries.sql, docs/sql.md).
//
//go:embed sql/queries.sql
var queriesSQL string

var qRole = sqlfile.MustParse("internal/service/sql/queries.sql", queriesSQL).Get("Role")

// RuntimeRole is the group role whose privileges the sweeper, the workers
// and the API need (internal/migrate/sql/roles.sql): the one a login must be
// granted.
const RuntimeRole = "owed_runtime"

// OperatorRole is on-call's group role (internal/migrate/sql/roles.sql):
// the console's login (OWED_OPERATOR_DATABASE_URL) and owedctl's operator
// commands. It holds accounts, pauses tenants and writes the audit trail,
// so no service's own login may be its member.
const OperatorRole = "owed_operator"

// CheckRole refuses a database role a service must not run as: a superuser
// or a BYPASSRLS role (row-level security does not bind either), a role that
// owns an owed_ table (an owner may turn the policies off), a member of any
// of those, and a session on which owed.bypass_rls, owed.tenant_id or
// owed.tenant_ids is already set (every statement would run across
// tenants, or in a tenant scope without asking for it). A ledger service's role must also be a
// member of owed_runtime (RuntimeRole), whose privileges it runs on, and of
// neither owed_definer (which sees every tenant's rows), owed_token_admin
// (which mints tokens) nor owed_operator (on-call's). The error names the
// role and every problem. Run it on a fresh pool: a connection that has run
// a scoped transaction no longer shows what a session starts with.
func CheckRole(ctx context.Context, db *sql.DB) error { return checkRole(ctx, db, RuntimeRole) }

// CheckOperatorRole is CheckRole for the console's login
// (OWED_OPERATOR_DATABASE_URL): a member of owed_operator (OperatorRole)
// instead, and of neither owed_definer nor owed_token_admin.
func CheckOperatorRole(ctx context.Context, db *sql.DB) error {
	return checkRole(ctx, db, OperatorRole)
}

// checkRole is CheckRole for a login that must be a member of want; want is
// empty for a role that is no ledger service's (the queue emulator's),
// which needs no group role.
func checkRole(ctx context.Context, db *sql.DB, want string) error {
	var (
		name                 string
		super, bypass        bool
		members, owns        string
		bypassRLS, tenantSet string
		privileged           string
		runtimeExists        bool
		runtime              bool
	)
	if err := db.QueryRowContext(ctx, qRole, want).Scan(&name, &super, &bypass, &members, &owns, &bypassRLS, &tenantSet,
		&privileged, &runtimeExists, &runtime); err != nil {
		return fmt.Errorf("check the database role: %w", err)
	}
	var problems []string
	if super {
		problems = append(problems, "it is a superuser, which row-level security does not bind")
	}
	if bypass {
		problems = append(problems, "it has BYPASSRLS, so row-level security does not bind it")
	}
	if members != "" {
		problems = append(problems, "it is a member of "+members+", a superuser or BYPASSRLS role it can SET ROLE to")
	}
	if owns != "" {
		problems = append(problems, "it owns (or is a member of the owner of) "+owns+", and an owner can turn row-level security off")
	}
	const from = "for every session (from the URL's options, PGOPTIONS, ALTER ROLE … SET or ALTER DATABASE … SET)"
	if bypassRLS != "" {
		problems = append(problems, fmt.Sprintf("owed.bypass_rls is %q %s, which turns tenant isolation off for every statement", bypassRLS, from))
	}
	if tenantSet != "" {
		problems = append(problems, fmt.Sprintf("%s is set %s, so a statement outside a tenant scope sees those tenants' rows", tenantSet, from))
	}
	if privileged != "" {
		problems = append(problems, "it is a member of "+privileged+": owed_definer owns the cross-tenant functions and "+
			"sees every tenant's rows, owed_token_admin mints tokens, owed_operator holds accounts, pauses tenants "+
			"and writes the operators' audit trail, and no service's own login needs any of them")
	}
	switch {
	case want == "":
	case !runtimeExists:
		problems = append(problems, "the role "+want+" does not exist: run `owedctl migrate up` as the owner (its role needs CREATEROLE)")
	case !runtime:
		problems = append(problems, fmt.Sprintf("it is not a member of %[1]s, whose privileges it runs on: GRANT %[1]s TO %[2]s",
			want, pq.QuoteIdentifier(name)))
	}
	if len(problems) == 0 {
		return nil
	}
	return &InsecureRoleError{Role: name, Problems: problems}
}

// CheckDatabase opens the database named by variable, checks its role (see
// CheckRole) and closes it again: the start-up check of a process that
// opens its own pool (the queue emulator).
func CheckDatabase(ctx context.Context, log zerolog.Logger, variable, url string, allowInsecure bool) error {
	db, err := OpenDatabase(ctx, variable, url, 1)
	if err != nil {
		return err
	}
	defer db.Close()
	return guard(ctx, db, log, allowInsecure, "")
}

// guardRole runs CheckRole; with allowInsecure (InsecureRoleVariable) it
// logs the refusal at error level, every problem named, and goes on.
func guardRole(ctx context.Context, db *sql.DB, log zerolog.Logger, allowInsecure bool) error {
	return guard(ctx, db, log, allowInsecure, RuntimeRole)
}

// OpenOperatorDB opens the console's pool on url, the value of variable
// (OWED_OPERATOR_DATABASE_URL), and checks its role (CheckOperatorRole);
// allowInsecure logs a refusal instead, as for the services' own pool.
func OpenOperatorDB(ctx context.Context, log zerolog.Logger, variable, url string, maxConns int, allowInsecure bool) (*sql.DB, error) {
	db, err := OpenDatabase(ctx, variable, url, maxConns)
	if err != nil {
		return nil, err
	}
	if err := guard(ctx, db, log, allowInsecure, OperatorRole); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", variable, err)
	}
	return db, nil
}

// guard is guardRole, for a login that must be a member of want
// (checkRole).
func guard(ctx context.Context, db *sql.DB, log zerolog.Logger, allowInsecure bool, want string) error {
	err := checkRole(ctx, db, want)
	var insecure *InsecureRoleError
	if err == nil || !allowInsecure || !errors.As(err, &insecure) {
		return err
	}
	log.Error().Str("role", insecure.Role).Strs("problems", insecure.Problems).
		Msg(InsecureRoleVariable + " is set: running as an insecure database role, tenant isolation is not enforced; development only")
	return nil
}

// InsecureRoleError is CheckRole's refusal.
type InsecureRoleError struct {
	Role     string
	Problems []string
}

func (e *InsecureRoleError) Error() string {
	return fmt.Sprintf("refusing to run as database role %q: %s. Connect as the application role (docs/security.md), "+
		"or, on a development machine only, set %s=true", e.Role, strings.Join(e.Problems, "; "), InsecureRoleVariable)
}

// Unready says why a readiness check that had to do something failed: a
// permission the role lacks is named as such (a role whose owed_runtime
// membership was revoked after start-up), anything else as "cannot <what>".
func Unready(what string, err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "42501" {
		return "permission denied to " + what + " (" + pqErr.Message + "): grant this role the services' privileges, GRANT " +
			RuntimeRole + " TO <role> (docs/security.md)"
	}
	return "cannot " + what
}

// SchemaReady is the readiness check of the database's schema: "ok: …"
// when this build runs on it (migrate.Check: any schema in its range, not
// only its own), else what to do about it.
func SchemaReady(ctx context.Context, db *sql.DB) (string, bool) {
	c, err := migrate.CheckThis(ctx, db)
	if err != nil {
		return Unready("read the migration version", err), false
	}
	return c.String(), c.Err() == nil
}
