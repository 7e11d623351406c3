-- Tenant isolation is a privilege, not a flag.
--
-- Until now every tenant table's policy let a row through when its tenant
-- matched owed.tenant_id or when owed.bypass_rls was 'on', and any session of
-- the application role could set either. This migration creates four group
-- roles (NOLOGIN; login roles are made members) and scopes every policy TO
-- the roles it serves:
--
--   owed_runtime      the sweeper, the workers, the API and owedctl's read
--                     commands: within-tenant DML on the tenant tables,
--                     SELECT on the pace tables and the migration version,
--                     nothing on owed_api_tokens. Every cross-tenant
--                     statement it runs is a SECURITY DEFINER function
--                     (migrations/00019, 00020) it may EXECUTE.
--   owed_apps         an application that writes SQL itself: its own
--                     tenant's owed_notifications, owed_items and
--                     owed_contacts, named through owed.tenant_id, nothing
--                     else.
--   owed_token_admin  owedctl tokens: the only role that may insert, update
--                     (revoke) or un-revoke api tokens.
--   owed_definer      owns the SECURITY DEFINER functions; no login role is
--                     ever a member. Its policy (USING true) exists only on
--                     the tables those functions read or write, and its
--                     table privileges are only what they need.
--
-- Roles are cluster-wide, so they are created only when missing, and the
-- migrating role needs CREATEROLE (docs/security.md). The login roles are
-- granted their group when they exist, as the earlier migrations granted
-- owed_app: owed_app joins owed_runtime, owed_admin joins owed_token_admin.
-- owed_app's own table grants move to owed_runtime, so what a login may do
-- is exactly its groups'.
--
-- The migrating role, which owns the tables, is exempt (a policy of its own,
-- USING true): an owner is no boundary, since it may drop any policy, and
-- every service refuses to run as it or a member of it (service.CheckRole).
-- Fixtures, benchmarks and operators' repairs run as the owner.
--
-- The policies are rewritten generically: every policy of a table with
-- row-level security in this schema that names owed.bypass_rls becomes the
-- tenant comparison alone, TO owed_runtime, owed_apps, whatever the table.
--
-- Down puts the old policies and grants back and revokes everything the
-- group roles were given in this database. It leaves the roles and their
-- members: both are the cluster's, and other databases may use them.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['owed_definer', 'owed_runtime', 'owed_apps', 'owed_token_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE', r);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT owed_runtime TO owed_app;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_admin') THEN
        GRANT owed_token_admin TO owed_admin;
    END IF;
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO owed_runtime, owed_apps, owed_token_admin, owed_definer;

-- owed_copy_table_grants grants p_to the DML p_from has on p_table: Up
-- moves owed_app's grants to owed_runtime, Down moves them back.
-- +goose StatementBegin
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
-- +goose StatementEnd
REVOKE EXECUTE ON PROCEDURE owed_copy_table_grants(text, text, text) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    t record;
    p record;
BEGIN
    FOR t IN SELECT c.relname, c.relrowsecurity,
                    EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
                                                           AND NOT a.attisdropped) AS tenant_column
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') LOOP
        -- A table nobody listed below (added by a later feature) keeps for
        -- owed_runtime what owed_app had on it.
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
            CALL owed_copy_table_grants('owed_app', 'owed_runtime', t.relname);
            EXECUTE format('REVOKE ALL ON %I FROM owed_app', t.relname);
        END IF;
        IF NOT t.relrowsecurity THEN
            CONTINUE;
        END IF;
        FOR p IN SELECT policyname FROM pg_policies
                  WHERE schemaname = 'public' AND tablename = t.relname
                    AND (qual LIKE '%owed.bypass_rls%' OR with_check LIKE '%owed.bypass_rls%') LOOP
            IF NOT t.tenant_column THEN
                RAISE EXCEPTION 'policy % on % names owed.bypass_rls but the table has no tenant_id', p.policyname, t.relname;
            END IF;
            EXECUTE format('DROP POLICY %I ON %I', p.policyname, t.relname);
            EXECUTE format('CREATE POLICY %I ON %I TO owed_runtime, owed_apps '
                           'USING (tenant_id = current_setting(''owed.tenant_id'', true)) '
                           'WITH CHECK (tenant_id = current_setting(''owed.tenant_id'', true))',
                           p.policyname, t.relname);
        END LOOP;
        EXECUTE format('CREATE POLICY %I ON %I TO %I USING (true) WITH CHECK (true)',
                       t.relname || '_owner', t.relname, current_user);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- The runtime role: within-tenant DML, as owed_app had, and reads only on
-- the tables that are not a tenant's: the pace is written through
-- owed_pace_* and tokens are read through owed_token_* (migrations/00020).
GRANT SELECT, INSERT, UPDATE ON owed_notifications, owed_notification_attempts TO owed_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_items, owed_contacts TO owed_runtime;
GRANT SELECT ON owed_provider_pace, owed_provider_limited_minutes, goose_db_version TO owed_runtime;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON owed_provider_pace, owed_provider_limited_minutes, owed_api_tokens FROM owed_runtime;
REVOKE ALL ON owed_api_tokens FROM owed_runtime;

-- Applications that write SQL: their own tenant's rows of the tables an
-- application fills (docs/api.md), nothing of tokens, pace or attempts.
GRANT SELECT, INSERT, UPDATE ON owed_notifications TO owed_apps;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_items, owed_contacts TO owed_apps;

-- Token administration. Tokens are revoked, never deleted.
GRANT SELECT, INSERT, UPDATE ON owed_api_tokens TO owed_token_admin;

-- The definer: only what its functions need. owed_notifications' INSERT
-- is for owed_apply_intent (migrations/00013), which a sweep's update of a
-- row with a reschedule intent fires.
GRANT SELECT, INSERT, UPDATE ON owed_notifications TO owed_definer;
GRANT SELECT ON owed_notification_attempts, owed_items TO owed_definer;
GRANT SELECT, INSERT, UPDATE ON owed_provider_pace TO owed_definer;
GRANT SELECT, INSERT ON owed_provider_limited_minutes TO owed_definer;
GRANT SELECT, UPDATE (last_used_at) ON owed_api_tokens TO owed_definer;
CREATE POLICY owed_notifications_definer ON owed_notifications TO owed_definer USING (true) WITH CHECK (true);
CREATE POLICY owed_notification_attempts_definer ON owed_notification_attempts TO owed_definer USING (true);
CREATE POLICY owed_items_definer ON owed_items TO owed_definer USING (true);

-- owed_definer_takes_functions hands every SECURITY DEFINER function of
-- this schema not yet owed_definer's to it, after revoking EXECUTE from
-- PUBLIC and granting it to owed_runtime for the functions named in
-- p_runtime (any other is private to the definer's own functions).
-- Migrations 00019 and 00020 call it after creating their functions.
-- Changing an owner takes membership of the new owner and its CREATE on the
-- schema, so the migrating role holds both for the call alone. It runs as
-- its caller, and only the owner may call it.
-- +goose StatementBegin
CREATE PROCEDURE owed_definer_takes_functions(p_runtime text[])
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    f record;
BEGIN
    GRANT owed_definer TO CURRENT_USER;
    GRANT CREATE ON SCHEMA public TO owed_definer;
    FOR f IN SELECT p.oid::regprocedure AS sig, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' AND p.prosecdef AND p.proowner <> 'owed_definer'::regrole LOOP
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
-- +goose StatementEnd
REVOKE EXECUTE ON PROCEDURE owed_definer_takes_functions(text[]) FROM PUBLIC;

-- +goose Down
DROP PROCEDURE owed_definer_takes_functions(text[]);
DROP POLICY owed_items_definer ON owed_items;
DROP POLICY owed_notification_attempts_definer ON owed_notification_attempts;
DROP POLICY owed_notifications_definer ON owed_notifications;

-- +goose StatementBegin
DO $$
DECLARE
    t record;
    p record;
    app boolean := EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app');
BEGIN
    FOR t IN SELECT c.relname, c.relrowsecurity
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') LOOP
        IF app THEN
            CALL owed_copy_table_grants('owed_runtime', 'owed_app', t.relname);
        END IF;
        EXECUTE format('REVOKE ALL ON %I FROM owed_runtime, owed_apps, owed_token_admin, owed_definer', t.relname);
        IF NOT t.relrowsecurity THEN
            CONTINUE;
        END IF;
        EXECUTE format('DROP POLICY IF EXISTS %I ON %I', t.relname || '_owner', t.relname);
        FOR p IN SELECT policyname FROM pg_policies
                  WHERE schemaname = 'public' AND tablename = t.relname
                    AND roles @> ARRAY['owed_runtime', 'owed_apps']::name[]
                    AND roles <@ ARRAY['owed_runtime', 'owed_apps']::name[] LOOP
            EXECUTE format('DROP POLICY %I ON %I', p.policyname, t.relname);
            EXECUTE format('CREATE POLICY %I ON %I '
                           'USING (tenant_id = current_setting(''owed.tenant_id'', true) '
                           'OR current_setting(''owed.bypass_rls'', true) = ''on'') '
                           'WITH CHECK (tenant_id = current_setting(''owed.tenant_id'', true) '
                           'OR current_setting(''owed.bypass_rls'', true) = ''on'')',
                           p.policyname, t.relname);
        END LOOP;
    END LOOP;
    IF app THEN
        -- What migrations 00002, 00004 and 00006 granted owed_app directly.
        GRANT SELECT, INSERT, UPDATE ON owed_api_tokens, owed_provider_pace TO owed_app;
        GRANT SELECT, INSERT ON owed_provider_limited_minutes TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

REVOKE USAGE ON SCHEMA public FROM owed_runtime, owed_apps, owed_token_admin, owed_definer;
DROP PROCEDURE owed_copy_table_grants(text, text, text);
