-- The shared pace: one row per provider account holding the GCRA state
-- that every worker process sending through the account reserves its sends
-- from (internal/pace), and the account's circuit and operator hold
-- (account.sql). It is not tenant data: an account's pace is shared by all
-- tenants by design, so the table has no row-level security. It holds no
-- recipient, payload or credential.
--
-- Because one row paces every tenant's sends through an account, a role
-- that could write it could pause every send: the runtime role reads it
-- (State, LimitedMinutes) and writes it only through the SECURITY DEFINER
-- functions here and in account.sql. Their parameters: $1 is the account,
-- durations are in microseconds, and the last is the injected clock (NULL:
-- clock_timestamp()).
--
-- A pause the runtime role asks for (owed_pace_pause after a 429, the
-- circuit's trip and probe) lasts at most an hour, 3600000000 us
-- (pace.MaxPause), and a negative one counts as none: a worker's 429 with a
-- longer Retry-After pauses the account an hour, and the next send's 429
-- pauses it again, so a login of the runtime role cannot hold an account
-- for longer than that with one call.
CREATE TABLE owed_provider_pace (
    -- The provider's Name(), e.g. "sandbox" or "sendgrid:acct".
    account           text        PRIMARY KEY CHECK (account <> '' AND octet_length(account) <= 128),
    -- GCRA's theoretical arrival time: the start of the next free slot is
    -- greatest(tat, now, paused_until), and taking it moves tat one
    -- interval past that start.
    tat               timestamptz NOT NULL,
    -- No slot starts before it: set from a 429's Retry-After, by an open
    -- circuit, or by a probe. NULL when never paused; greatest() ignores
    -- NULL.
    paused_until      timestamptz,
    updated_at        timestamptz NOT NULL,
    -- The account's circuit (account.sql): an account-level error (an
    -- expired or revoked credential, no credits, a suspended account)
    -- pauses every send on the account, in every worker process, instead of
    -- failing every row in flight. account_reason is the provider's code
    -- (short: a metric label), account_error what the provider said
    -- (redacted by the adapter), account_paused_at when the circuit first
    -- opened. A reason says the pause is an open circuit, not a rate limit.
    account_reason    text        CHECK (octet_length(account_reason) <= 128),
    account_error     text        CHECK (octet_length(account_error) <= 1024),
    account_paused_at timestamptz,
    -- On-call's hold (account.sql): why, who, and since when.
    hold_reason       text        CHECK (octet_length(hold_reason) <= 1024),
    hold_actor        text        CHECK (octet_length(hold_actor) <= 128),
    held_at           timestamptz,
    -- The database login that held it (session_user); NULL for a hold made
    -- before it was recorded.
    hold_login        text        CHECK (octet_length(hold_login) <= 64),
    CONSTRAINT owed_provider_pace_account_circuit CHECK ((account_reason IS NULL) = (account_paused_at IS NULL)),
    CONSTRAINT owed_provider_pace_hold CHECK ((hold_reason IS NULL) = (held_at IS NULL)
                                              AND (hold_actor IS NULL) = (held_at IS NULL))
);

-- No DELETE for anyone: forgetting a pace row would let the next
-- reservation start a fresh schedule.
GRANT SELECT ON owed_provider_pace TO owed_runtime;
GRANT SELECT, INSERT, UPDATE ON owed_provider_pace TO owed_definer;

-- One row per provider account and minute in which a worker got a 429, so
-- on-call can ask "in what fraction of minutes did we hit the provider's
-- limit" without Prometheus (owedctl stats), and how many 429s each minute
-- had (responses: the console's history charts it per account). A 429 is
-- not an attempt, so owed_notification_attempts never records it. Not
-- tenant data: no row-level security.
CREATE TABLE owed_provider_limited_minutes (
    account text        NOT NULL,
    minute  timestamptz NOT NULL,
    PRIMARY KEY (account, minute),
    responses integer   NOT NULL DEFAULT 1 CHECK (responses >= 1)
);
GRANT SELECT ON owed_provider_limited_minutes TO owed_runtime;
GRANT SELECT, INSERT ON owed_provider_limited_minutes TO owed_definer;
GRANT UPDATE (responses) ON owed_provider_limited_minutes TO owed_definer;

-- owed_pace_reserve takes up to $5 slots for the account, one interval ($2)
-- apart, as many as start within the max wait ($3), or none when the first
-- free slot starts later; it answers the row as it was locked, the new tat
-- (NULL: nothing taken) and the instant the slots were computed from.
-- internal/pace/sql/queries.sql (ReserveN) explains each step. It reads
-- clock_timestamp(), not now(): now() is frozen at the start of the
-- transaction, before the statement waited for the row lock behind other
-- processes, so a slot computed from it could already lie in the past and
-- let two sends through closer than one interval.
CREATE FUNCTION owed_pace_reserve(p_account text, p_interval bigint, p_max_wait bigint, p_now timestamptz,
                                  p_n integer)
RETURNS TABLE (tat timestamptz, paused_until timestamptz, new_tat timestamptz, computed_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH locked AS (
    SELECT tat, paused_until
      FROM owed_provider_pace
     WHERE account = $1
       FOR UPDATE
), taken AS (
    UPDATE owed_provider_pace p
       SET (tat, updated_at) = (
           SELECT s.start + least($5, floor((extract(epoch FROM s.now - s.start) * 1000000 + $3) / $2)::int + 1)
                            * ($2 * interval '1 microsecond'),
                  s.now
             FROM (SELECT greatest(l.tat, c.now, l.paused_until) AS start, c.now
                     FROM (SELECT coalesce($4, clock_timestamp()) AS now) c) s)
      FROM locked l
     WHERE p.account = $1
       AND greatest(l.tat, coalesce($4, clock_timestamp()), l.paused_until)
           <= coalesce($4, clock_timestamp()) + ($3 * interval '1 microsecond')
    RETURNING p.tat, p.updated_at
)
SELECT l.tat, l.paused_until, t.tat, coalesce(t.updated_at, coalesce($4, clock_timestamp()))
  FROM locked l LEFT JOIN taken t ON true
$$;
ALTER FUNCTION owed_pace_reserve(text, bigint, bigint, timestamptz, integer) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_pace_reserve(text, bigint, bigint, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_pace_reserve(text, bigint, bigint, timestamptz, integer) TO owed_runtime;

-- owed_pace_create makes the account's row on its first reservation, with
-- nothing reserved.
CREATE FUNCTION owed_pace_create(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_pace (account, tat, updated_at)
VALUES ($1, coalesce($2, clock_timestamp()), coalesce($2, clock_timestamp()))
ON CONFLICT (account) DO NOTHING
$$;
ALTER FUNCTION owed_pace_create(text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_pace_create(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_pace_create(text, timestamptz) TO owed_runtime;

-- owed_pace_give_back returns $3 of reserved time a send did not use, only
-- while tat is still what the reservation left ($2): a later reservation
-- has built on it otherwise. It answers how many rows it changed.
CREATE FUNCTION owed_pace_give_back(p_account text, p_end timestamptz, p_back bigint, p_now timestamptz)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH given AS (
    UPDATE owed_provider_pace
       SET tat = tat - ($3 * interval '1 microsecond'),
           updated_at = coalesce($4, clock_timestamp())
     WHERE account = $1 AND tat = $2
    RETURNING 1
)
SELECT count(*) FROM given
$$;
ALTER FUNCTION owed_pace_give_back(text, timestamptz, bigint, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_pace_give_back(text, timestamptz, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_pace_give_back(text, timestamptz, bigint, timestamptz) TO owed_runtime;

-- owed_pace_pause pauses the account for $2 (at most an hour) after a 429,
-- never shortening a pause already set, and records the limited minute.
CREATE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes AS m (account, minute)
    VALUES ($1, date_trunc('minute', coalesce($3, clock_timestamp())))
    ON CONFLICT (account, minute) DO UPDATE SET responses = m.responses + 1
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
ALTER FUNCTION owed_pace_pause(text, bigint, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_pace_pause(text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_pace_pause(text, bigint, timestamptz) TO owed_runtime;

-- owed_pace_record_limited_minute records that the account was limited in
-- this minute, once more.
CREATE FUNCTION owed_pace_record_limited_minute(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
INSERT INTO owed_provider_limited_minutes AS m (account, minute)
VALUES ($1, date_trunc('minute', coalesce($2, clock_timestamp())))
ON CONFLICT (account, minute) DO UPDATE SET responses = m.responses + 1
$$;
ALTER FUNCTION owed_pace_record_limited_minute(text, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_pace_record_limited_minute(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_pace_record_limited_minute(text, timestamptz) TO owed_runtime;
