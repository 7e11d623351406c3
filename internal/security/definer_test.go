package security_test

// Definer functions and the caller's temporary objects (docs/security.md,
// "Roles"): a SECURITY DEFINER function runs with owed_definer's reach, so
// the names in its body must resolve to owed's objects whatever the caller
// put in its own session. A path that does not name pg_temp has it searched
// first for tables; every definer function pins search_path = pg_catalog,
// public, pg_temp (internal/migrate/sql/roles.sql).

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/testdb"
)

// pinnedPath is the proconfig every definer function carries.
const pinnedPath = "search_path=pg_catalog, public, pg_temp"

// shadowed are the built-in functions a test session shadows with
// temporary ones, beside every function of the schema: the ones the
// definer functions' bodies call.
var shadowed = []string{
	"now() RETURNS timestamptz",
	"clock_timestamp() RETURNS timestamptz",
	"current_setting(text, boolean) RETURNS text",
	"split_part(text, text, integer) RETURNS text",
	"date_trunc(text, timestamptz) RETURNS timestamptz",
	"sha256(bytea) RETURNS bytea",
	"octet_length(text) RETURNS integer",
}

// shadowedOperators are the comparisons shadowed by temporary operators, on
// each of shadowedTypes.
var (
	shadowedOperators = []string{"=", "<>", "<", "<=", ">", ">="}
	shadowedTypes     = []string{"text", "bigint", "integer", "bytea", "timestamptz", "boolean"}
)

// userOf is the login a connection URL names.
func userOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.User == nil {
		t.Fatalf("no user in %q (%v)", u, err)
	}
	return p.User.Username()
}

// allowTemp lets login create temporary objects in db. Setups that follow
// docs/security.md revoke TEMP from PUBLIC (testdb does too); the pin must
// hold where a deployment did not, so the attacker here may.
func allowTemp(t *testing.T, db *testdb.DB, login string) {
	t.Helper()
	if _, err := db.Owner.Exec(fmt.Sprintf("GRANT TEMPORARY ON DATABASE %s TO %s",
		pq.QuoteIdentifier(db.Name), pq.QuoteIdentifier(login))); err != nil {
		t.Fatal(err)
	}
}

// shadowSession opens one connection as dbURL and creates, in its temporary
// schema, a table of the same name and columns as every table and view of
// the schema (granted to PUBLIC, as an attacker would, so a definer could
// read and write it), a sequence for every sequence, and a function for
// every function of the schema, every shadowed built-in and every
// shadowed operator, each raising "shadow ... used". forge then writes the
// attacker's rows into the temporary tables.
func shadowSession(t *testing.T, db *testdb.DB, dbURL string, forge []string) *sql.Conn {
	t.Helper()
	return shadowing(t, db, dbURL, nil, forge)
}

// shadowing is shadowSession with the tables to shadow named (only), or
// everything (only nil).
func shadowing(t *testing.T, db *testdb.DB, dbURL string, only []string, forge []string) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	pool, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	conn, err := pool.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	var stmts []string
	rows, err := db.Owner.Query(`
SELECT c.relname, c.relkind,
       coalesce(string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
 GROUP BY c.relname, c.relkind`)
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for rows.Next() {
		var name, kind, cols string
		if err := rows.Scan(&name, &kind, &cols); err != nil {
			t.Fatal(err)
		}
		q := pq.QuoteIdentifier(name)
		if only != nil && !slices.Contains(only, name) {
			continue
		}
		if kind == "S" {
			stmts = append(stmts, "CREATE TEMP SEQUENCE "+q, "GRANT ALL ON SEQUENCE pg_temp."+q+" TO PUBLIC")
			continue
		}
		tables++
		stmts = append(stmts, "CREATE TEMP TABLE "+q+" ("+cols+")", "GRANT ALL ON pg_temp."+q+" TO PUBLIC")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if tables < 10 && only == nil || tables < len(only) {
		t.Fatalf("only %d tables of the schema to shadow", tables)
	}
	if only != nil {
		for _, s := range append(stmts, forge...) {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		return conn
	}

	raise := func(what string) string {
		return fmt.Sprintf("LANGUAGE plpgsql AS $s$BEGIN RAISE EXCEPTION 'shadow %s used'; END$s$", strings.ReplaceAll(what, "'", "''"))
	}
	rows, err = db.Owner.Query(`
SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public' AND p.prokind = 'f'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, args, result string
		if err := rows.Scan(&name, &args, &result); err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, fmt.Sprintf("CREATE FUNCTION pg_temp.%s(%s) RETURNS %s %s",
			pq.QuoteIdentifier(name), args, result, raise("function "+name)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for _, f := range shadowed {
		stmts = append(stmts, "CREATE FUNCTION pg_temp."+f+" "+raise("function "+f))
	}
	for i, typ := range shadowedTypes {
		for j, op := range shadowedOperators {
			fn := fmt.Sprintf("owed_shadow_op_%d_%d", i, j)
			stmts = append(stmts,
				fmt.Sprintf("CREATE FUNCTION pg_temp.%s(%s, %s) RETURNS boolean %s", fn, typ, typ, raise("operator "+typ+" "+op)),
				fmt.Sprintf("CREATE OPERATOR pg_temp.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = pg_temp.%s)", op, typ, typ, fn))
		}
	}
	for _, s := range append(stmts, forge...) {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return conn
}

// tempUse is how many scans and row changes of the session's temporary
// tables the backend counts so far, by table.
func tempUse(t *testing.T, tx *sql.Tx) map[string]int64 {
	t.Helper()
	rows, err := tx.Query(`
SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del
  FROM pg_stat_xact_all_tables WHERE schemaname = (SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema())`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	use := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			use[name] = n
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return use
}

// callEveryDefiner calls, in one transaction on conn that it rolls back,
// every SECURITY DEFINER function of the schema the session may EXECUTE,
// with NULL arguments, and fails the test on each call that used a
// temporary table or raised from a shadow. It answers how many it called.
func callEveryDefiner(t *testing.T, who string, conn *sql.Conn) int {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.Query(`
SELECT p.proname, coalesce((SELECT string_agg('NULL::' || format_type(a.t, NULL), ', ' ORDER BY a.i)
                              FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY a(t, i)), '')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public' AND p.prosecdef AND p.prokind = 'f' AND has_function_privilege(p.oid, 'EXECUTE')
 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type call struct{ name, args string }
	var calls []call
	for rows.Next() {
		var c call
		if err := rows.Scan(&c.name, &c.args); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	// The counts may carry this session's earlier statements (the backend
	// reports them in batches), so each call is judged by what it added.
	before := tempUse(t, tx)
	for _, c := range calls {
		stmt := fmt.Sprintf("SELECT * FROM public.%s(%s)", pq.QuoteIdentifier(c.name), c.args)
		if _, err := tx.Exec("SAVEPOINT each"); err != nil {
			t.Fatal(err)
		}
		// A NULL argument may well be refused (a NOT NULL column); only a
		// shadow's error, or a use of a temporary table, is a failure.
		_, err := tx.Exec(stmt)
		if err != nil && strings.Contains(err.Error(), "shadow") {
			t.Errorf("%s: %s reached a temporary object: %v", who, stmt, err)
		}
		if _, err := tx.Exec("ROLLBACK TO SAVEPOINT each"); err != nil {
			t.Fatal(err)
		}
		after := tempUse(t, tx)
		for table, n := range after {
			if n > before[table] {
				t.Errorf("%s: %s read or wrote the caller's temporary table %s", who, stmt, table)
			}
		}
		before = after
	}
	return len(calls)
}

// Every SECURITY DEFINER function in the catalog pins search_path with
// pg_temp last, so a new one without the pin fails here; and none uses a
// temporary table, function or operator its caller created, as the runtime
// role and as an owed_apps login. The two reproductions of the review: a
// temporary owed_notification_attempts made owed_receipt_record write a
// receipt onto another tenant's row, and a temporary owed_api_tokens made
// owed_token_authenticate answer a forged tenant.
func TestDefinerFunctionsIgnoreTemporaryObjects(t *testing.T) {
	db := boundary(t)
	rows, err := db.Owner.Query(`
SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ';'), '')
  FROM pg_proc p WHERE p.prosecdef AND p.pronamespace <> 'pg_catalog'::regnamespace
   AND p.pronamespace <> 'information_schema'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	definers := 0
	for rows.Next() {
		var name, config string
		if err := rows.Scan(&name, &config); err != nil {
			t.Fatal(err)
		}
		definers++
		if config != pinnedPath {
			t.Errorf("SECURITY DEFINER %s: proconfig %q, want %q", name, config, pinnedPath)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if definers < 30 {
		t.Fatalf("only %d SECURITY DEFINER functions in the catalog", definers)
	}

	// Tenant B's row has an accepted send whose id the provider knows.
	var rowB int64
	if err := db.Owner.QueryRow(`SELECT id FROM owed_notifications WHERE tenant_id = $1`, tenantB).Scan(&rowB); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Owner.Exec(`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider,
		started_at, finished_at, outcome, provider_message_id) VALUES ($1, $2, 1, 'twilio', now(), now(), 'accepted', 'SM-real-b')`,
		rowB, tenantB); err != nil {
		t.Fatal(err)
	}

	app := db.AppURL
	allowTemp(t, db, testdb.AppUser())
	conn := shadowing(t, db, app, []string{"owed_notification_attempts", "owed_api_tokens"}, []string{
		// The attacker's attempt names tenant B's row under a message id
		// the attacker chose, and its token names tenant B.
		fmt.Sprintf(`INSERT INTO owed_notification_attempts (id, notification_id, tenant_id, attempt, provider,
			started_at, finished_at, outcome, provider_message_id)
			VALUES (1, %d, 'tenant-b', 1, 'twilio', now(), now(), 'accepted', 'SM-forged')`, rowB),
		`INSERT INTO owed_api_tokens (id, tenant_id, token_hash, name) VALUES (1, 'tenant-b', sha256('forged'::bytea), 'forged')`,
	})
	ctx := context.Background()
	var known, recorded bool
	if err := conn.QueryRowContext(ctx, `SELECT * FROM owed_receipt_record('twilio', 'SM-forged', 'bounced', NULL, NULL, NULL)`).
		Scan(&known, &recorded); err != nil {
		t.Errorf("owed_receipt_record with a temporary owed_notification_attempts: %v", err)
	}
	if known || recorded {
		t.Errorf("owed_receipt_record with a temporary owed_notification_attempts: known %v, recorded %v; want neither", known, recorded)
	}
	var receipts int
	var status sql.NullString
	if err := db.Owner.QueryRow(`SELECT (SELECT count(*) FROM owed_receipts), receipt_status FROM owed_notifications WHERE id = $1`,
		rowB).Scan(&receipts, &status); err != nil {
		t.Fatal(err)
	}
	if receipts != 0 || status.Valid {
		t.Errorf("tenant B's row got %d receipts and receipt_status %v from a temporary table", receipts, status)
	}
	tok, err := conn.QueryContext(ctx, `SELECT tenant_id FROM owed_token_authenticate(sha256('forged'::bytea), NULL, 60)`)
	if err != nil {
		t.Fatal(err)
	}
	for tok.Next() {
		var tenant string
		tok.Scan(&tenant)
		t.Errorf("owed_token_authenticate with a temporary owed_api_tokens answered tenant %q for a forged token", tenant)
	}
	tok.Close()
	// The real receipt still finds its row: the pin changes nothing for
	// the tables themselves.
	if err := conn.QueryRowContext(ctx, `SELECT * FROM owed_receipt_record('twilio', 'SM-real-b', 'delivered', NULL, NULL, NULL)`).
		Scan(&known, &recorded); err != nil || !known || !recorded {
		t.Errorf("a real receipt: known %v, recorded %v (err %v), want both", known, recorded, err)
	}
	conn = shadowSession(t, db, app, nil)
	if n := callEveryDefiner(t, "the runtime role", conn); n < 25 {
		t.Errorf("the runtime role may call only %d definer functions", n)
	}

	// An owed_apps login bound to tenant A forges a binding to tenant B in
	// a temporary owed_apps_logins: owed_apps_tenant still reads the real
	// one, so naming B shows nothing.
	apps := appsRole(t, db)
	allowTemp(t, db, userOf(t, apps))
	conn = shadowing(t, db, apps, []string{"owed_apps_logins"}, []string{
		fmt.Sprintf(`INSERT INTO owed_apps_logins VALUES (%s, 'tenant-b', now(), 'mallory', 'mallory')`,
			pq.QuoteLiteral(userOf(t, apps))),
	})
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_id', 'tenant-b', true)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`SELECT count(*) FROM public.owed_notifications`).Scan(&seen); err != nil || seen != 0 {
		t.Errorf("an owed_apps login with a temporary binding to tenant B sees %d of its rows (err %v), want none", seen, err)
	}
	tx.Rollback()
	conn = shadowSession(t, db, apps, nil)
	if n := callEveryDefiner(t, "an owed_apps login", conn); n != 1 {
		t.Errorf("an owed_apps login may call %d definer functions, want owed_apps_tenant alone", n)
	}
}

// Where owed's setup makes the database (deploy/postgres/init.sql, the dev
// stack, scripts/with-postgres.sh and every test database), TEMPORARY is
// revoked from PUBLIC: neither the runtime role nor an owed_apps login may
// create a temporary table at all.
func TestTemporaryObjectsAreTheOwnersAlone(t *testing.T) {
	db := testdb.New(t)
	for who, u := range map[string]string{"the runtime role": db.AppURL, "an owed_apps login": appsRole(t, db)} {
		pool, err := sql.Open("postgres", u)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pool.Exec(`CREATE TEMP TABLE owed_notification_attempts (id bigint)`)
		pool.Close()
		if !permissionDenied(err) {
			t.Errorf("%s: CREATE TEMP TABLE: %v, want permission denied", who, err)
		}
	}
}
