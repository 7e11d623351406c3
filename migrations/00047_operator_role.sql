-- On-call's own role, and pauses the runtime role cannot abuse.
--
-- A login of the runtime role (any service's) could hold a provider account,
-- pause a tenant and append to the operators' audit trail under any name it
-- chose: a forged "alice" line showed in the console's audit page. From here
-- those are owed_operator's alone: the group role the console's login
-- (OWED_OPERATOR_DATABASE_URL) and owedctl's operator commands connect as,
-- itself a member of owed_runtime. Each of those writes records the
-- database login (session_user) beside the name the tool says: login on the
-- audit trail and the tenant pauses, hold_login on the pace row.
--
-- And a pause the runtime role asks for is bounded: owed_pace_pause('x',
-- 1e15, NULL) paused an account until 2058. owed_pace_pause, the circuit's
-- trip and its probe now pause at most an hour (pace.MaxPause); a longer
-- Retry-After pauses an hour, and the next 429 pauses again.
--
-- No owed:breaks-before marker: every statement of the previous release
-- still runs, except that its console and its owedctl pause commands, which
-- connect as the runtime role, are refused the hold, the tenant pause and
-- the audit line until the new release's operator login serves them
-- (docs/upgrade.md). Refusing those is the point of the migration.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_operator') THEN
        CREATE ROLE owed_operator NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
    GRANT owed_runtime TO owed_operator;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_oncall') THEN
        GRANT owed_operator TO owed_oncall;
    END IF;
END
$$;
-- +goose StatementEnd

ALTER TABLE owed_operator_audit ADD COLUMN login text CHECK (octet_length(login) <= 64);
ALTER TABLE owed_tenant_pauses ADD COLUMN login text CHECK (octet_length(login) <= 64);
ALTER TABLE owed_provider_pace ADD COLUMN hold_login text CHECK (octet_length(hold_login) <= 64);

GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, session_user)
RETURNING id
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at, login)
VALUES ($1, $2, $3, coalesce($4, clock_timestamp()), session_user)
ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3, login = session_user
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes (account, minute)
    VALUES ($1, date_trunc('minute', coalesce($3, clock_timestamp())))
    ON CONFLICT DO NOTHING
), until AS (
    SELECT coalesce($3, clock_timestamp()) + (least(greatest($2, 0), 3600000000) * interval '1 microsecond') AS at
)
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at)
SELECT $1, u.at, u.at, coalesce($3, clock_timestamp()) FROM until u
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, excluded.paused_until),
       tat = greatest(p.tat, excluded.tat),
       updated_at = excluded.updated_at
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_trip(p_account text, p_pause bigint, p_reason text, p_error text,
                                           p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at, account_reason, account_error,
                                     account_paused_at)
VALUES ($1, coalesce($5, clock_timestamp()),
        coalesce($5, clock_timestamp()) + (least(greatest($2, 0), 3600000000) * interval '1 microsecond'),
        coalesce($5, clock_timestamp()), $3, $4, coalesce($5, clock_timestamp()))
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, excluded.paused_until),
       account_reason = $3, account_error = $4,
       account_paused_at = coalesce(p.account_paused_at, coalesce($5, clock_timestamp())),
       updated_at = coalesce($5, clock_timestamp())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_probe(p_account text, p_pause bigint, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH probe AS (
    UPDATE owed_provider_pace
       SET paused_until = coalesce($3, clock_timestamp()) + (least(greatest($2, 0), 3600000000) * interval '1 microsecond'),
           updated_at = coalesce($3, clock_timestamp())
     WHERE account = $1 AND account_reason IS NOT NULL
       AND (paused_until IS NULL OR paused_until <= coalesce($3, clock_timestamp()))
    RETURNING 1
)
SELECT count(*) > 0 FROM probe
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_hold(p_account text, p_reason text, p_actor text, p_now timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_pace AS p (account, tat, updated_at, hold_reason, hold_actor, held_at, hold_login)
VALUES ($1, coalesce($4, clock_timestamp()), coalesce($4, clock_timestamp()), $2, $3, coalesce($4, clock_timestamp()),
        session_user)
ON CONFLICT (account) DO UPDATE
   SET hold_reason = $2, hold_actor = $3, held_at = coalesce(p.held_at, coalesce($4, clock_timestamp())),
       hold_login = session_user, updated_at = coalesce($4, clock_timestamp())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_unhold(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH lifted AS (
    UPDATE owed_provider_pace
       SET hold_reason = NULL, hold_actor = NULL, held_at = NULL, hold_login = NULL,
           updated_at = coalesce($2, clock_timestamp())
     WHERE account = $1 AND held_at IS NOT NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM lifted
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) FROM owed_runtime;
GRANT EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) TO owed_operator;
REVOKE EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) FROM owed_runtime;
GRANT EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) TO owed_operator;
REVOKE EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) FROM owed_runtime;
GRANT EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) TO owed_operator;
REVOKE EXECUTE ON FUNCTION owed_tenant_resume(text) FROM owed_runtime;
GRANT EXECUTE ON FUNCTION owed_tenant_resume(text) TO owed_operator;
REVOKE EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) FROM owed_runtime;
GRANT EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) TO owed_operator;
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
-- owed_operator and its memberships stay: roles are the cluster's, and
-- other databases may use them.
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_operator_audit_record(p_now timestamptz, p_operator text, p_action text, p_target text,
                                           p_count integer, p_reason text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason)
VALUES (coalesce($1, now()), $2, $3, $4, $5, $6)
RETURNING id
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at)
VALUES ($1, $2, $3, coalesce($4, clock_timestamp()))
ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes (account, minute)
    VALUES ($1, date_trunc('minute', coalesce($3, clock_timestamp())))
    ON CONFLICT DO NOTHING
)
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at)
VALUES ($1, coalesce($3, clock_timestamp()) + ($2 * interval '1 microsecond'),
        coalesce($3, clock_timestamp()) + ($2 * interval '1 microsecond'), coalesce($3, clock_timestamp()))
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, coalesce($3, clock_timestamp()) + ($2 * interval '1 microsecond')),
       tat = greatest(p.tat, coalesce($3, clock_timestamp()) + ($2 * interval '1 microsecond')),
       updated_at = coalesce($3, clock_timestamp())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_trip(p_account text, p_pause bigint, p_reason text, p_error text,
                                           p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at, account_reason, account_error,
                                     account_paused_at)
VALUES ($1, coalesce($5, clock_timestamp()), coalesce($5, clock_timestamp()) + ($2 * interval '1 microsecond'),
        coalesce($5, clock_timestamp()), $3, $4, coalesce($5, clock_timestamp()))
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, coalesce($5, clock_timestamp()) + ($2 * interval '1 microsecond')),
       account_reason = $3, account_error = $4,
       account_paused_at = coalesce(p.account_paused_at, coalesce($5, clock_timestamp())),
       updated_at = coalesce($5, clock_timestamp())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_probe(p_account text, p_pause bigint, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH probe AS (
    UPDATE owed_provider_pace
       SET paused_until = coalesce($3, clock_timestamp()) + ($2 * interval '1 microsecond'),
           updated_at = coalesce($3, clock_timestamp())
     WHERE account = $1 AND account_reason IS NOT NULL
       AND (paused_until IS NULL OR paused_until <= coalesce($3, clock_timestamp()))
    RETURNING 1
)
SELECT count(*) > 0 FROM probe
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_hold(p_account text, p_reason text, p_actor text, p_now timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_pace AS p (account, tat, updated_at, hold_reason, hold_actor, held_at)
VALUES ($1, coalesce($4, clock_timestamp()), coalesce($4, clock_timestamp()), $2, $3, coalesce($4, clock_timestamp()))
ON CONFLICT (account) DO UPDATE
   SET hold_reason = $2, hold_actor = $3, held_at = coalesce(p.held_at, coalesce($4, clock_timestamp())),
       updated_at = coalesce($4, clock_timestamp())
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_unhold(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH lifted AS (
    UPDATE owed_provider_pace
       SET hold_reason = NULL, hold_actor = NULL, held_at = NULL, updated_at = coalesce($2, clock_timestamp())
     WHERE account = $1 AND held_at IS NOT NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM lifted
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) FROM owed_operator;
GRANT EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) TO owed_runtime;
REVOKE EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) FROM owed_operator;
GRANT EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) TO owed_runtime;
REVOKE EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) FROM owed_operator;
GRANT EXECUTE ON FUNCTION owed_tenant_pause(text, text, text, timestamptz) TO owed_runtime;
REVOKE EXECUTE ON FUNCTION owed_tenant_resume(text) FROM owed_operator;
GRANT EXECUTE ON FUNCTION owed_tenant_resume(text) TO owed_runtime;
REVOKE EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) FROM owed_operator;
GRANT EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) TO owed_runtime;
REVOKE owed_definer FROM CURRENT_USER;

ALTER TABLE owed_provider_pace DROP COLUMN hold_login;
ALTER TABLE owed_tenant_pauses DROP COLUMN login;
ALTER TABLE owed_operator_audit DROP COLUMN login;
