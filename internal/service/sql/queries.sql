-- The statement internal/service runs itself, by name; role.go binds it
-- when the package is initialised.

-- name: Role
-- Role reads, for the session's role ($1: the group role it must be a
-- member of, owed_runtime or owed_operator, empty for none), everything that would make
-- row-level security a no-op for it. Role attributes are not inherited, but
-- a member of a superuser or BYPASSRLS role can SET ROLE to it, and a member
-- of a table's owner can act as the owner (ALTER TABLE … DISABLE ROW LEVEL
-- SECURITY, DROP POLICY), so membership counts as much as the role itself.
-- A tenant scope set for every session (owed.tenant_id, or owed.tenant_ids,
-- the worker batches' set of tenants: owed_tenant_scope) comes back as
-- the settings that are set. current_setting reads what every new session
-- starts with: the URL's
-- options, PGOPTIONS, ALTER ROLE … SET and ALTER DATABASE … SET all land
-- there before owed's first statement.
SELECT r.rolname, r.rolsuper, r.rolbypassrls,
       coalesce((SELECT string_agg(m.rolname, ', ' ORDER BY m.rolname) FROM pg_roles m
                 WHERE m.oid <> r.oid AND (m.rolsuper OR m.rolbypassrls) AND pg_has_role(r.oid, m.oid, 'MEMBER')), ''),
       coalesce((SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c
                 WHERE c.relkind IN ('r', 'p') AND c.relname LIKE 'owed\_%' AND pg_has_role(r.oid, c.relowner, 'MEMBER')), ''),
       coalesce(current_setting('owed.bypass_rls', true), ''),
       concat_ws(', ', 'owed.tenant_id = ' || nullif(current_setting('owed.tenant_id', true), ''),
                 'owed.tenant_ids = ' || nullif(current_setting('owed.tenant_ids', true), '')),
       coalesce((SELECT string_agg(g.rolname, ', ' ORDER BY g.rolname) FROM pg_roles g
                 WHERE g.rolname IN ('owed_definer', 'owed_token_admin', 'owed_operator') AND g.rolname <> $1
                   AND pg_has_role(r.oid, g.oid, 'MEMBER')), ''),
       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = $1),
       EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = $1 AND pg_has_role(r.oid, g.oid, 'USAGE'))
FROM pg_roles r WHERE r.rolname = current_user
