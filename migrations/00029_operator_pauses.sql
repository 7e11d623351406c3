-- Operator pauses (issue 18): on-call stops every send of a provider
-- account, or of one tenant, by hand, and the pause stays until on-call
-- lifts it.
--
-- An account's hold lives in its pace row (owed_provider_pace), beside the
-- circuit of migrations/00022, but apart from it: the circuit is the
-- workers' (an account error opens it, a probe's good answer closes it),
-- the hold is on-call's alone. A worker never probes a held account and no
-- worker's answer lifts the hold; `owedctl provider resume --account NAME`
-- lifts both (owed_provider_account_resume for the circuit, then
-- owed_provider_account_unhold). hold_reason and hold_actor say why and who,
-- held_at since when.
--
-- A tenant's pause is a row of owed_tenant_pauses. The table is not a
-- tenant's own data but the operators' about tenants: every worker reads
-- every row (one statement a second per worker, not one per send), so it
-- has no row-level security; the runtime role may SELECT it and write it
-- only through owed_tenant_pause and owed_tenant_resume, as it writes the
-- pace rows only through their functions (migrations/00020).
--
-- Expand-only: new columns (nullable), a new table and new functions; the
-- circuit's functions keep their meaning for the previous release, which
-- ignores holds and tenant pauses.

-- +goose Up
ALTER TABLE owed_provider_pace
    ADD COLUMN hold_reason text CHECK (octet_length(hold_reason) <= 1024),
    ADD COLUMN hold_actor text CHECK (octet_length(hold_actor) <= 128),
    ADD COLUMN held_at timestamptz,
    ADD CONSTRAINT owed_provider_pace_hold CHECK ((hold_reason IS NULL) = (held_at IS NULL)
                                                  AND (hold_actor IS NULL) = (held_at IS NULL));

CREATE TABLE owed_tenant_pauses (
    tenant_id text        PRIMARY KEY CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    reason    text        NOT NULL CHECK (reason <> '' AND octet_length(reason) <= 1024),
    -- Who paused it: the operator's name (owedctl: the OS user, or --actor).
    actor     text        NOT NULL CHECK (actor <> '' AND octet_length(actor) <= 128),
    paused_at timestamptz NOT NULL
);
GRANT SELECT ON owed_tenant_pauses TO owed_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_tenant_pauses TO owed_definer;

-- owed_provider_account_hold holds every send on the account until
-- owed_provider_account_unhold. Holding a held account again replaces the
-- reason and the actor and keeps held_at, so on-call sees how long it has
-- been held. An account without a pace row gets one with nothing reserved.
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_hold(p_account text, p_reason text, p_actor text, p_now timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
INSERT INTO owed_provider_pace AS p (account, tat, updated_at, hold_reason, hold_actor, held_at)
VALUES ($1, coalesce($4, clock_timestamp()), coalesce($4, clock_timestamp()), $2, $3, coalesce($4, clock_timestamp()))
ON CONFLICT (account) DO UPDATE
   SET hold_reason = $2, hold_actor = $3, held_at = coalesce(p.held_at, coalesce($4, clock_timestamp())),
       updated_at = coalesce($4, clock_timestamp())
$$;
-- +goose StatementEnd

-- owed_provider_account_unhold lifts the hold and answers whether there was
-- one.
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_unhold(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH lifted AS (
    UPDATE owed_provider_pace
       SET hold_reason = NULL, hold_actor = NULL, held_at = NULL, updated_at = coalesce($2, clock_timestamp())
     WHERE account = $1 AND held_at IS NOT NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM lifted
$$;
-- +goose StatementEnd

-- owed_tenant_pause pauses every send of the tenant; pausing a paused
-- tenant again replaces the reason and the actor and keeps paused_at.
-- +goose StatementBegin
CREATE FUNCTION owed_tenant_pause(p_tenant text, p_reason text, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
INSERT INTO owed_tenant_pauses AS t (tenant_id, reason, actor, paused_at)
VALUES ($1, $2, $3, coalesce($4, clock_timestamp()))
ON CONFLICT (tenant_id) DO UPDATE SET reason = $2, actor = $3
$$;
-- +goose StatementEnd

-- owed_tenant_resume lifts the tenant's pause and answers whether there was
-- one.
-- +goose StatementBegin
CREATE FUNCTION owed_tenant_resume(p_tenant text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH lifted AS (
    DELETE FROM owed_tenant_pauses WHERE tenant_id = $1 RETURNING 1
)
SELECT count(*) > 0 FROM lifted
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_provider_account_hold', 'owed_provider_account_unhold',
    'owed_tenant_pause', 'owed_tenant_resume']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_tenant_resume(text);
DROP FUNCTION owed_tenant_pause(text, text, text, timestamptz);
DROP FUNCTION owed_provider_account_unhold(text, timestamptz);
DROP FUNCTION owed_provider_account_hold(text, text, text, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;
DROP TABLE owed_tenant_pauses;
ALTER TABLE owed_provider_pace
    DROP CONSTRAINT owed_provider_pace_hold,
    DROP COLUMN held_at,
    DROP COLUMN hold_actor,
    DROP COLUMN hold_reason;
