-- A tenant's pause: on-call stops every send of one tenant by hand, and the
-- pause stays until on-call lifts it (`owedctl tenant pause|resume`, the
-- console). The table is not a tenant's own data but the operators' about
-- tenants: every worker reads every row (one statement a second per
-- worker, not one per send), so it has no row-level security. The runtime
-- role reads it; only an operator login (owed_operator) writes it, through
-- owed_tenant_pause and owed_tenant_resume.
CREATE TABLE owed_tenant_pauses (
    tenant_id text        PRIMARY KEY CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    reason    text        NOT NULL CHECK (reason <> '' AND octet_length(reason) <= 1024),
    -- Who paused it: the operator's name (owedctl: the OS user, or --actor).
    actor     text        NOT NULL CHECK (actor <> '' AND octet_length(actor) <= 128),
    paused_at timestamptz NOT NULL,
    -- The database login that paused it (session_user), as the database
    -- saw it; NULL for a pause made before it was recorded.
    login     text        CHECK (octet_length(login) <= 64)
);
GRANT SELECT ON owed_tenant_pauses TO owed_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_tenant_pauses TO owed_definer;

-- owed_tenant_pause pauses every send of the tenant; pausing a paused
-- tenant again replaces the reason, the actor and the login and keeps
-- paused_at. The operators' audit trail (owed_operator_audit,
-- internal/ledger/sql/operator.sql) gets its line in the same statement,
-- so no pause goes unrecorded, whichever tool asked for it.
CREATE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH paused AS (
    INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at, login)
    VALUES ($1, $2, $3, coalesce($4, clock_timestamp()), session_user)
    ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3, login = session_user
)
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (coalesce($4, now()), $3, 'tenant_pause', 'tenant=' || $1, 1, $2, session_user)
$$;
ALTER FUNCTION owed_tenant_pause(text, text, text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) TO owed_operator;

-- owed_tenant_resume lifts the tenant's pause and answers whether there was
-- one, with its line of the audit trail (count 1 when it lifted a pause, 0
-- when there was none) naming p_operator and p_reason.
CREATE FUNCTION owed_tenant_resume(p_tenant text, p_operator text, p_reason text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH lifted AS (
    DELETE FROM owed_tenant_pauses WHERE tenant_id = $1 RETURNING 1
), audited AS (
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    SELECT coalesce($4, now()), $2, 'tenant_resume', 'tenant=' || $1, count(*), coalesce($3, ''), session_user
      FROM lifted
    RETURNING count
)
SELECT count > 0 FROM audited
$$;
ALTER FUNCTION owed_tenant_resume(text, text, text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_tenant_resume(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_tenant_resume(text, text, text, timestamptz) TO owed_operator;

-- owed_tenant_resume(p_tenant) is the previous release's, kept while it
-- runs on this schema (docs/upgrade.md): its console and owedctl name no
-- operator, so the line names the database login.
CREATE FUNCTION owed_tenant_resume(p_tenant text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_tenant_resume($1, session_user::text, '', NULL)
$$;
ALTER FUNCTION owed_tenant_resume(text) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_tenant_resume(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_tenant_resume(text) TO owed_operator;
