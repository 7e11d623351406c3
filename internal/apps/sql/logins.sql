-- Which tenants an owed_apps login may name. An application that writes
-- SQL itself connects as a login of owed_apps and names its tenant through
-- owed.tenant_id (docs/api.md); the setting is the session's to set, so on
-- its own it bound nothing: such a login that named another tenant read and
-- changed that tenant's rows. Each tenant table's policy for owed_apps
-- (notifications.sql, items.sql, contacts.sql, undeliverable.sql) lets a
-- login see and write a tenant's rows only when it named the tenant and a
-- row here binds the login (session_user, which no SET ROLE changes) to it.
-- A login with no row sees and writes nothing.
--
-- The runtime role's policies are not these: it names any tenant, one per
-- transaction, and its hot path keeps a plain comparison with the setting.
--
-- Binding a login is handing out a tenant's credentials, as minting a
-- token is, so it is owed_token_admin's (`owedctl apps bind|unbind|list`),
-- through owed_apps_bind and owed_apps_unbind, which write the binding and
-- its line of the operators' audit trail in one statement.
CREATE TABLE owed_apps_logins (
    -- The login's name (a role that is a member of owed_apps). A binding
    -- names the login, not the role's oid: drop the binding with the login.
    login       text        NOT NULL CHECK (login <> '' AND octet_length(login) <= 63),
    tenant_id   text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    bound_at    timestamptz NOT NULL,
    -- Who bound it: the operator owedctl names (--operator, or the OS user)
    -- and the database login that ran it, recorded by the database.
    bound_by    text        NOT NULL CHECK (bound_by <> '' AND octet_length(bound_by) <= 256),
    bound_login text        NOT NULL CHECK (octet_length(bound_login) <= 64),
    PRIMARY KEY (login, tenant_id)
);

GRANT SELECT ON owed_apps_logins TO owed_token_admin;
GRANT SELECT, INSERT, DELETE ON owed_apps_logins TO owed_definer;

-- owed_apps_tenant is the tenant an owed_apps login's statement may touch:
-- the one its transaction names in owed.tenant_id when a binding gives the
-- login that tenant, else NULL, which matches no row. The policies call it
-- as an uncorrelated subquery, (SELECT owed_apps_tenant()), which Postgres
-- runs once per statement, not once per row, and compare tenant_id with
-- its answer, so the tenant indexes serve the statement as they do the
-- runtime role's.
CREATE FUNCTION owed_apps_tenant() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT b.tenant_id FROM owed_apps_logins b
 WHERE b.login = session_user AND b.tenant_id = current_setting('owed.tenant_id', true)
$$;
ALTER FUNCTION owed_apps_tenant() OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_apps_tenant() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_apps_tenant() TO owed_apps;

-- owed_apps_bind binds the login p_login to the tenant p_tenant and
-- answers whether the binding is new; binding it again changes nothing.
-- The login must exist and be a member of owed_apps. Either way one line
-- goes to the operators' audit trail (count 1 when it bound, 0 when it was
-- bound already) with p_operator, p_reason and the database login that
-- ran it. plpgsql, so the trail's table (internal/ledger/sql/operator.sql)
-- is looked up when it runs.
CREATE FUNCTION owed_apps_bind(p_login text, p_tenant text, p_operator text, p_reason text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_new boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_login) THEN
        RAISE EXCEPTION 'login % does not exist', p_login USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_has_role(p_login, 'owed_apps', 'MEMBER') THEN
        RAISE EXCEPTION 'login % is not a member of owed_apps: GRANT owed_apps TO % first', p_login, p_login
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO owed_apps_logins (login, tenant_id, bound_at, bound_by, bound_login)
    VALUES (p_login, p_tenant, now(), p_operator, session_user)
    ON CONFLICT (login, tenant_id) DO NOTHING;
    v_new := FOUND;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (now(), p_operator, 'apps_bind', format('login=%s tenant=%s', p_login, p_tenant),
            CASE WHEN v_new THEN 1 ELSE 0 END, coalesce(p_reason, ''), session_user);
    RETURN v_new;
END
$$;
ALTER FUNCTION owed_apps_bind(text, text, text, text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_apps_bind(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_apps_bind(text, text, text, text) TO owed_token_admin;

-- owed_apps_unbind removes the binding and answers whether there was one,
-- with its line of the audit trail as owed_apps_bind writes it. The
-- login's next statement in that tenant's scope sees nothing.
CREATE FUNCTION owed_apps_unbind(p_login text, p_tenant text, p_operator text, p_reason text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_had boolean;
BEGIN
    DELETE FROM owed_apps_logins WHERE login = p_login AND tenant_id = p_tenant;
    v_had := FOUND;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (now(), p_operator, 'apps_unbind', format('login=%s tenant=%s', p_login, p_tenant),
            CASE WHEN v_had THEN 1 ELSE 0 END, coalesce(p_reason, ''), session_user);
    RETURN v_had;
END
$$;
ALTER FUNCTION owed_apps_unbind(text, text, text, text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_apps_unbind(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_apps_unbind(text, text, text, text) TO owed_token_admin;
