-- The provider account's circuit (issue 17): an account-level error (an
-- expired or revoked credential, no credits, a suspended account) pauses
-- every send on the account, in every worker process, instead of failing
-- every row in flight.
--
-- The circuit lives in the account's pace row (owed_provider_pace), because
-- a pause is what both a 429 and an account error are: paused_until holds
-- every process's next reservation back (owed_pace_reserve already starts
-- no slot before it), and the gate stops receiving for the account while it
-- lasts. account_reason (the provider's code, short: a metric label) and
-- account_error (what the provider said, redacted by the adapter) say that
-- the pause is an open circuit, not a rate limit: when paused_until passes,
-- one worker takes the probe (owed_provider_account_probe, which holds every
-- other worker back for another pause) and sends one real message; a
-- success closes the circuit (owed_provider_account_resume), another
-- account error opens it again (owed_provider_account_trip). On-call closes
-- it by hand with `owedctl provider resume --account NAME`, the same
-- function.
--
-- The runtime role keeps its SELECT on the table (the new columns with it)
-- and writes them only through these functions, as migrations/00020 does
-- for the pace. Parameters: $1 the account, durations in microseconds, the
-- last the injected clock (NULL: clock_timestamp()).

-- +goose Up
ALTER TABLE owed_provider_pace
    ADD COLUMN account_reason text CHECK (octet_length(account_reason) <= 128),
    ADD COLUMN account_error text CHECK (octet_length(account_error) <= 1024),
    ADD COLUMN account_paused_at timestamptz,
    ADD CONSTRAINT owed_provider_pace_account_circuit CHECK ((account_reason IS NULL) = (account_paused_at IS NULL));

-- owed_provider_account_trip opens (or re-opens) the circuit: no slot starts
-- before now + $2, and the reason and error are the latest account error's.
-- account_paused_at keeps the first trip's instant while the circuit stays
-- open, so on-call sees how long the account has been down.
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_trip(p_account text, p_pause bigint, p_reason text, p_error text,
                                           p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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

-- owed_provider_account_probe hands the probe to its caller when the
-- circuit is open and its pause has passed, and holds every other worker
-- back for another pause ($2) meanwhile: a probe that never answers (its
-- worker died) is followed by another one a pause later. It answers whether
-- the caller took the probe; the row lock makes exactly one caller win.
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_probe(p_account text, p_pause bigint, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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

-- owed_provider_account_resume closes the circuit and lifts the pause (a
-- probe succeeded, or on-call resumed the account). It answers whether the
-- circuit was open.
-- +goose StatementBegin
CREATE FUNCTION owed_provider_account_resume(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH resumed AS (
    UPDATE owed_provider_pace
       SET paused_until = NULL, account_reason = NULL, account_error = NULL, account_paused_at = NULL,
           updated_at = coalesce($2, clock_timestamp())
     WHERE account = $1 AND account_reason IS NOT NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM resumed
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_provider_account_trip', 'owed_provider_account_probe',
    'owed_provider_account_resume']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_provider_account_resume(text, timestamptz);
DROP FUNCTION owed_provider_account_probe(text, bigint, timestamptz);
DROP FUNCTION owed_provider_account_trip(text, bigint, text, text, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;
ALTER TABLE owed_provider_pace
    DROP CONSTRAINT owed_provider_pace_account_circuit,
    DROP COLUMN account_paused_at,
    DROP COLUMN account_error,
    DROP COLUMN account_reason;
