-- An idle sweep never reads the ledger sequentially: the survey asks
-- whether a pending row is owed by the horizon as the earliest pending due
-- time, read from owed_notifications_owed_due in due order, instead of an
-- EXISTS the planner answered by reading the table from its start
-- (internal/ledger/sql/sweep.sql, owed_sweep_survey_fair). Same answer,
-- same signature.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
                                       p_channels text[], p_accounts integer[], p_names text[],
                                       p_count_up_to integer)
RETURNS TABLE (outstanding integer[], pending boolean, requeues boolean, oldest_owed_age_s double precision,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH clock AS (
    SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon,
           coalesce($1, now()) + make_interval(secs => $3) AS live_until
), flight AS (
    SELECT f.* FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $4, $5, $7) f
)
SELECT (SELECT array_agg(coalesce((SELECT sum(f.due_by_horizon) FROM flight f WHERE f.account = a), 0)::integer
                         ORDER BY a)
          FROM generate_subscripts($6, 1) a),
       coalesce((SELECT o.due_at FROM owed_notifications o
                  WHERE o.settled_at IS NULL AND o.state = 'pending'
                    AND (o.expires_at IS NULL OR o.expires_at > c.now)
                  ORDER BY o.due_at LIMIT 1) <= c.horizon, false),
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.horizon
                  AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))
                  AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
         WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
         ORDER BY o.due_at LIMIT 1),
       c.now
  FROM clock c
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_survey_fair(p_now timestamptz, p_ahead double precision, p_live_for double precision,
                                       p_channels text[], p_accounts integer[], p_names text[],
                                       p_count_up_to integer)
RETURNS TABLE (outstanding integer[], pending boolean, requeues boolean, oldest_owed_age_s double precision,
               asked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
WITH clock AS (
    SELECT coalesce($1, now()) AS now, coalesce($1, now()) + make_interval(secs => $2) AS horizon,
           coalesce($1, now()) + make_interval(secs => $3) AS live_until
), flight AS (
    SELECT f.* FROM clock c, owed_sweep_in_flight(c.now, c.horizon, c.live_until, $4, $5, $7) f
)
SELECT (SELECT array_agg(coalesce((SELECT sum(f.due_by_horizon) FROM flight f WHERE f.account = a), 0)::integer
                         ORDER BY a)
          FROM generate_subscripts($6, 1) a),
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.settled_at IS NULL AND o.due_at <= c.horizon AND o.state = 'pending'
                  AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       EXISTS (SELECT FROM owed_notifications o
                WHERE o.state IN ('leased', 'queued', 'sending') AND o.lease_until <= c.horizon
                  AND (o.lease_until <= c.now OR owed_handed_back(o.state, o.lease_until, o.not_before))
                  AND o.due_at <= c.horizon AND (o.expires_at IS NULL OR o.expires_at > c.now)),
       (SELECT extract(epoch FROM c.now - o.due_at)::double precision FROM owed_notifications o
         WHERE o.settled_at IS NULL AND o.due_at > '-infinity' AND o.due_at <= c.now
         ORDER BY o.due_at LIMIT 1),
       c.now
  FROM clock c
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
