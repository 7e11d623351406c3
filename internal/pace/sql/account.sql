-- A provider account's circuit and on-call's hold, both in the account's
-- pace row (pace.sql), because a pause is what a 429, an account error and
-- a hold all are: paused_until holds every process's next reservation back
-- (owed_pace_reserve starts no slot before it), and the gate stops
-- receiving for the account while it lasts.
--
-- The circuit is the workers': an account error opens it
-- (owed_provider_account_trip); when its pause passes, one worker takes the
-- probe (owed_provider_account_probe) and sends one real message; a success
-- closes it (owed_provider_account_resume), another account error opens it
-- again. The hold is on-call's alone: a worker never probes a held account
-- and no worker's answer lifts the hold. `owedctl provider resume --account
-- NAME` and the console lift both (owed_provider_account_unhold).

-- owed_provider_account_trip opens (or re-opens) the circuit: no slot
-- starts before now + $2 (at most an hour, pace.sql), and the reason and
-- error are the latest account error's. account_paused_at keeps the first
-- trip's instant while the circuit stays open, so on-call sees how long the
-- account has been down.
CREATE FUNCTION owed_provider_account_trip(p_account text, p_pause bigint, p_reason text, p_error text,
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
ALTER FUNCTION owed_provider_account_trip(text, bigint, text, text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_trip(text, bigint, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_trip(text, bigint, text, text, timestamptz) TO owed_runtime;

-- owed_provider_account_probe hands the probe to its caller when the
-- circuit is open and its pause has passed, and holds every other worker
-- back for another pause ($2, at most an hour) meanwhile: a probe that never
-- answers (its worker died) is followed by another one a pause later. It
-- answers whether the caller took the probe; the row lock makes exactly one
-- caller win.
CREATE FUNCTION owed_provider_account_probe(p_account text, p_pause bigint, p_now timestamptz) RETURNS boolean
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
ALTER FUNCTION owed_provider_account_probe(text, bigint, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_probe(text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_probe(text, bigint, timestamptz) TO owed_runtime;

-- owed_provider_account_resume closes the circuit and lifts its pause (a
-- probe succeeded, or on-call resumed the account). It answers whether the
-- circuit was open.
CREATE FUNCTION owed_provider_account_resume(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH resumed AS (
    UPDATE owed_provider_pace
       SET paused_until = NULL, account_reason = NULL, account_error = NULL, account_paused_at = NULL,
           updated_at = coalesce($2, clock_timestamp())
     WHERE account = $1 AND account_reason IS NOT NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM resumed
$$;
ALTER FUNCTION owed_provider_account_resume(text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_resume(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_resume(text, timestamptz) TO owed_runtime;

-- owed_provider_account_hold holds every send on the account until
-- owed_provider_account_unhold. Holding a held account again replaces the
-- reason, the actor and the login and keeps held_at, so on-call sees how
-- long it has been held. An account without a pace row gets one with
-- nothing reserved. Holding and lifting a hold is on-call's alone
-- (owed_operator): no worker holds an account. The operators' audit trail
-- (owed_operator_audit, internal/ledger/sql/operator.sql) gets its line in
-- the same statement, so no hold goes unrecorded, whichever tool asked.
CREATE FUNCTION owed_provider_account_hold(p_account text, p_reason text, p_actor text, p_now timestamptz)
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
ALTER FUNCTION owed_provider_account_hold(text, text, text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_hold(text, text, text, timestamptz) TO owed_operator;

-- owed_provider_account_unhold is on-call's resume: it lifts the hold,
-- closes the circuit an account error opened and lifts its pause (as
-- owed_provider_account_resume does for a good probe), and answers whether
-- the account was held or its circuit open. Its line of the audit trail
-- names p_operator and p_reason, count 1 when something was lifted, 0
-- when nothing was.
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
ALTER FUNCTION owed_provider_account_unhold(text, text, text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_unhold(text, text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_unhold(text, text, text, timestamptz) TO owed_operator;

-- owed_provider_account_unhold(p_account, p_now) is the previous
-- release's, kept while it runs on this schema (docs/upgrade.md): its
-- console and owedctl name no operator, so the line names the database
-- login.
CREATE FUNCTION owed_provider_account_unhold(p_account text, p_now timestamptz) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT owed_provider_account_unhold($1, session_user::text, '', $2)
$$;
ALTER FUNCTION owed_provider_account_unhold(text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_provider_account_unhold(text, timestamptz) TO owed_operator;
