-- owed's group roles, what the schema lets each do, and the two procedures
-- the migrations use to hand out privileges.
--
-- Tenant isolation is a privilege, not a flag a session may set. Four
-- group roles (NOLOGIN; a deployment's login roles are made members):
--
--   owed_runtime      the sweeper, the workers, the API and owedctl's read
--                     commands. Within-tenant DML on the tenant tables,
--                     SELECT on the pace tables and the version tables,
--                     nothing on owed_api_tokens. Every statement it runs
--                     across tenants is a SECURITY DEFINER function it may
--                     EXECUTE (owed_sweep_*, owed_ledger_*, owed_pace_*, ...).
--   owed_apps         an application that writes SQL itself: its own
--                     tenant's owed_notifications, owed_items and
--                     owed_contacts, named through owed.tenant_id, and
--                     nothing else.
--   owed_token_admin  owedctl tokens and owedctl apps: the only role that
--                     may insert or revoke api tokens, and bind an
--                     owed_apps login to its tenants.
--   owed_operator     on-call: the console's login and owedctl's operator
--                     commands. A member of owed_runtime (it reads and
--                     redrives what the services do), and the only role
--                     that may hold a provider account, pause a tenant and
--                     append to the operators' audit trail; each of those
--                     records the database login (session_user) that did
--                     it, not a name the caller says.
--   owed_definer      owns the SECURITY DEFINER functions. No login role is
--                     ever its member; its policies (USING true) exist only
--                     on the tables those functions read or write, and its
--                     grants are only what they need.
--
-- Each table's grants and policies are with the table, in its owner's
-- file. The migrating role owns every table and has a policy of its own
-- on each tenant table (USING true, TO CURRENT_USER): an owner is no
-- boundary, since it may drop any policy, so every service refuses to run
-- as it (service.CheckRole) and only fixtures, benchmarks and operators'
-- repairs do.
--
-- Every SECURITY DEFINER function pins search_path = pg_catalog, public,
-- pg_temp. Naming pg_temp, last, matters: a path that leaves it out has it
-- searched first for tables, so a caller's temporary table called
-- owed_notification_attempts was what owed_receipt_record read, and the
-- receipt landed on the row the caller chose. Functions and operators are
-- never looked up in pg_temp. internal/security's
-- TestDefinerFunctionsIgnoreTemporaryObjects holds every definer function in
-- the catalog to the pin, and proves no temporary table, function or
-- operator is used.
--
-- Roles are the cluster's, not the database's: they are created only when
-- missing (the migrating role needs CREATEROLE, docs/security.md), and a
-- deployment's login roles join their group when they exist: owed_app
-- joins owed_runtime, owed_admin joins owed_token_admin and owed_oncall
-- joins owed_operator.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['owed_definer', 'owed_runtime', 'owed_apps', 'owed_token_admin', 'owed_operator'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE', r);
        END IF;
    END LOOP;
    GRANT owed_runtime TO owed_operator;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT owed_runtime TO owed_app;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_admin') THEN
        GRANT owed_token_admin TO owed_admin;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_oncall') THEN
        GRANT owed_operator TO owed_oncall;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO owed_runtime, owed_apps, owed_token_admin, owed_definer;

-- owed_copy_table_grants grants p_to the SELECT, INSERT, UPDATE and DELETE
-- that p_from holds on p_table. The migration that introduced the group
-- roles moves owed_app's grants to owed_runtime with it, and its Down moves
-- them back; nothing else calls it.
CREATE PROCEDURE owed_copy_table_grants(p_from text, p_to text, p_table text)
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    privs text;
BEGIN
    SELECT string_agg(DISTINCT g.privilege_type, ', ') INTO privs
      FROM information_schema.role_table_grants g
     WHERE g.grantee = p_from AND g.table_schema = 'public' AND g.table_name = p_table
       AND g.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE');
    IF privs IS NOT NULL THEN
        EXECUTE format('GRANT %s ON %I TO %I', privs, p_table, p_to);
    END IF;
END
$$;
REVOKE EXECUTE ON PROCEDURE owed_copy_table_grants(text, text, text) FROM PUBLIC;

-- owed_definer_takes_functions is how a migration hands its new SECURITY
-- DEFINER functions to owed_definer: every such function of the schema not
-- yet the definer's loses PUBLIC's EXECUTE, gains owed_runtime's when its
-- name is in p_runtime (any other is private to the definer's own
-- functions), and changes owner. Changing an owner takes membership of the
-- new owner and the new owner's CREATE on the schema, so the procedure
-- holds both for the call alone. It runs as its caller, and only the
-- owner may call it. (The home files say each function's owner and grants
-- beside the function instead.) owed_ledger_partitions_keep stays the
-- owner's: it creates partitions, which takes the tables' ownership
-- (internal/ledger/sql/notifications.sql).
CREATE PROCEDURE owed_definer_takes_functions(p_runtime text[])
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    f record;
BEGIN
    GRANT owed_definer TO CURRENT_USER;
    GRANT CREATE ON SCHEMA public TO owed_definer;
    FOR f IN SELECT p.oid::regprocedure AS sig, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' AND p.prosecdef AND p.proowner <> 'owed_definer'::regrole
                AND p.proname <> 'owed_ledger_partitions_keep' LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.sig);
        IF f.proname = ANY (p_runtime) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO owed_runtime', f.sig);
        END IF;
        EXECUTE format('ALTER FUNCTION %s OWNER TO owed_definer', f.sig);
    END LOOP;
    REVOKE CREATE ON SCHEMA public FROM owed_definer;
    REVOKE owed_definer FROM CURRENT_USER;
END
$$;
REVOKE EXECUTE ON PROCEDURE owed_definer_takes_functions(text[]) FROM PUBLIC;
