-- Every operator write lands in the operators' audit trail
-- (owed_operator_audit), from the console and owedctl alike: the review
-- found that a hold made in the console and lifted by `owedctl provider
-- resume` left the audit page showing a hold never lifted, since only the
-- console wrote lines, after the fact. The write functions now write the
-- line themselves, in the same statement: owed_provider_account_hold and
-- owed_tenant_pause (the actor is the operator), and the new
-- owed_provider_account_unhold(account, operator, reason, now), which also
-- closes the circuit, and owed_tenant_resume(tenant, operator, reason,
-- now). The token administrator may append its lines beside the tokens it
-- creates and revokes.
--
-- Expand-only: the previous release's owed_provider_account_unhold(text,
-- timestamptz) and owed_tenant_resume(text) stay, now writing a line that
-- names the database login; its console also writes its own line, so a
-- pause made by it during the rollout shows twice.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_hold(p_account text, p_reason text, p_actor text, p_now timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH held AS (
    INSERT INTO owed_provider_pace AS p (account, tat, updated_at, hold_reason, hold_actor, held_at, hold_login)
    VALUES ($1, coalesce($4, clock_timestamp()), coalesce($4, clock_timestamp()), $2, $3, coalesce($4, clock_timestamp()),
            session_user)
    ON CONFLICT (account) DO UPDATE
       SET hold_reason = $2, hold_actor = $3, held_at = coalesce(p.held_at, coalesce($4, clock_timestamp())),
           hold_login = session_user, updated_at = coalesce($4, clock_timestamp())
)
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (coalesce($4, now()), $3, 'account_hold', 'account=' || $1, 1, $2, session_user)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH paused AS (
    INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at, login)
    VALUES ($1, $2, $3, coalesce($4, clock_timestamp()), session_user)
    ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3, login = session_user
)
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (coalesce($4, now()), $3, 'tenant_pause', 'tenant=' || $1, 1, $2, session_user)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_unhold(p_account text, p_operator text, p_reason text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_held boolean;
    v_open boolean;
BEGIN
    UPDATE owed_provider_pace
       SET hold_reason = NULL, hold_actor = NULL, held_at = NULL, hold_login = NULL,
           updated_at = coalesce(p_now, clock_timestamp())
     WHERE account = p_account AND held_at IS NOT NULL;
    v_held := FOUND;
    UPDATE owed_provider_pace
       SET paused_until = NULL, account_reason = NULL, account_error = NULL, account_paused_at = NULL,
           updated_at = coalesce(p_now, clock_timestamp())
     WHERE account = p_account AND account_reason IS NOT NULL;
    v_open := FOUND;
    INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
    VALUES (coalesce(p_now, now()), p_operator, 'account_resume', 'account=' || p_account,
            CASE WHEN v_held OR v_open THEN 1 ELSE 0 END, coalesce(p_reason, ''), session_user);
    RETURN v_held OR v_open;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
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
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_provider_account_unhold(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_unhold(text, text, text, timestamptz) TO owed_operator;
REVOKE EXECUTE ON FUNCTION owed_tenant_resume(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_tenant_resume(text, text, text, timestamptz) TO owed_operator;
CALL owed_definer_takes_functions(ARRAY[]::text[]);
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_provider_account_unhold(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_provider_account_unhold($1, session_user::text, '', $2)
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_tenant_resume(p_tenant text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_tenant_resume($1, session_user::text, '', NULL)
$$;
-- +goose StatementEnd
GRANT EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) TO owed_token_admin;
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
REVOKE EXECUTE ON FUNCTION owed_operator_audit_record(timestamptz, text, text, text, integer, text) FROM owed_token_admin;
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
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_tenant_resume(p_tenant text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH lifted AS (
    DELETE FROM owed_tenant_pauses WHERE tenant_id = $1 RETURNING 1
)
SELECT count(*) > 0 FROM lifted
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
CREATE OR REPLACE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at, login)
VALUES ($1, $2, $3, coalesce($4, clock_timestamp()), session_user)
ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3, login = session_user
$$;
-- +goose StatementEnd
DROP FUNCTION owed_provider_account_unhold(text, text, text, timestamptz);
DROP FUNCTION owed_tenant_resume(text, text, text, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;
