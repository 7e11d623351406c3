-- The pace's writes and the API's token look-up as SECURITY DEFINER
-- functions owned by owed_definer (migrations/00018, 00019).
--
-- owed_provider_pace and owed_provider_limited_minutes are not a tenant's:
-- one row paces every tenant's sends through a provider account, so a role
-- that could write it could pause every send. The runtime role keeps SELECT
-- on both (State, LimitedMinutes) and writes them only through these
-- functions: reserve, create, give back, pause and record a limited minute,
-- each exactly the statement internal/pace/queries.go explains.
--
-- owed_api_tokens is read before the tenant is known, so the API resolves a
-- token by its hash through owed_token_authenticate (the token's id and
-- tenant, and whether last_used_at is stale, never another row) and
-- refreshes last_used_at through owed_token_touch. Creating, revoking and
-- listing tokens is owed_token_admin's, by plain SQL on the table.
--
-- Parameters keep the statements' numbering: $1 is the account, the last
-- the injected clock (NULL: clock_timestamp()), durations in microseconds.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION owed_pace_reserve(p_account text, p_interval bigint, p_max_wait bigint, p_now timestamptz,
                                  p_n integer)
RETURNS TABLE (tat timestamptz, paused_until timestamptz, new_tat timestamptz, computed_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_pace_create(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
INSERT INTO owed_provider_pace (account, tat, updated_at)
VALUES ($1, coalesce($2, clock_timestamp()), coalesce($2, clock_timestamp()))
ON CONFLICT (account) DO NOTHING
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_pace_give_back(p_account text, p_end timestamptz, p_back bigint, p_now timestamptz)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH given AS (
    UPDATE owed_provider_pace
       SET tat = tat - ($3 * interval '1 microsecond'),
           updated_at = coalesce($4, clock_timestamp())
     WHERE account = $1 AND tat = $2
    RETURNING 1
)
SELECT count(*) FROM given
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_pace_pause(p_account text, p_pause bigint, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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
CREATE FUNCTION owed_pace_record_limited_minute(p_account text, p_now timestamptz) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
INSERT INTO owed_provider_limited_minutes (account, minute)
VALUES ($1, date_trunc('minute', coalesce($2, clock_timestamp())))
ON CONFLICT DO NOTHING
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION owed_token_authenticate(p_hash bytea, p_now timestamptz, p_resolution double precision)
RETURNS TABLE (id bigint, tenant_id text, stale boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT t.id, t.tenant_id, t.last_used_at IS NULL OR t.last_used_at < coalesce($2, now()) - make_interval(secs => $3)
  FROM owed_api_tokens t WHERE t.token_hash = $1 AND t.revoked_at IS NULL
$$;
-- +goose StatementEnd

-- The staleness is checked again so concurrent requests write once.
-- +goose StatementBegin
CREATE FUNCTION owed_token_touch(p_id bigint, p_now timestamptz, p_resolution double precision) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
UPDATE owed_api_tokens SET last_used_at = coalesce($2, now())
 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < coalesce($2, now()) - make_interval(secs => $3))
$$;
-- +goose StatementEnd

-- Each to owed_definer, EXECUTE for owed_runtime alone (migrations/00018).
CALL owed_definer_takes_functions(ARRAY['owed_pace_reserve', 'owed_pace_create', 'owed_pace_give_back',
    'owed_pace_pause', 'owed_pace_record_limited_minute', 'owed_token_authenticate', 'owed_token_touch']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_token_touch(bigint, timestamptz, double precision);
DROP FUNCTION owed_token_authenticate(bytea, timestamptz, double precision);
DROP FUNCTION owed_pace_record_limited_minute(text, timestamptz);
DROP FUNCTION owed_pace_pause(text, bigint, timestamptz);
DROP FUNCTION owed_pace_give_back(text, timestamptz, bigint, timestamptz);
DROP FUNCTION owed_pace_create(text, timestamptz);
DROP FUNCTION owed_pace_reserve(text, bigint, bigint, timestamptz, integer);
REVOKE owed_definer FROM CURRENT_USER;
