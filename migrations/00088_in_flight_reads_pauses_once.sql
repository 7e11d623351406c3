-- The count of rows in flight that each lease slice and survey makes
-- (owed_sweep_in_flight) reads the paused tenants once per statement, as
-- an array, instead of probing owed_tenant_pauses once per row in flight
-- under the lease's generic plan, and counts per tenant and channel before
-- it finds each channel's account (internal/ledger/sql/sweep.sql says
-- why). Same signature, same answers.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_in_flight(p_now timestamptz, p_horizon timestamptz, p_live_until timestamptz,
                                     p_channels text[], p_accounts integer[], p_limit integer)
RETURNS TABLE (tenant_id text, account integer, due_now bigint, due_by_horizon bigint)
LANGUAGE sql STABLE AS $$
SELECT g.tenant_id, owed_sweep_account_of(g.channel, p_channels, p_accounts),
       sum(g.due_now)::bigint, sum(g.total)::bigint
  FROM (SELECT f.tenant_id, f.channel,
               count(*) FILTER (WHERE greatest(f.due_at, f.not_before) <= p_now) AS due_now, count(*) AS total
          FROM (SELECT o.tenant_id, o.channel, o.due_at, o.not_before FROM owed_notifications o
                 WHERE o.state IN ('leased', 'queued', 'sending')
                   AND o.lease_until > p_now AND o.lease_until <= p_live_until AND o.due_at <= p_horizon
                   AND NOT coalesce(owed_handed_back(o.state, o.lease_until, o.not_before), false)
                   AND o.tenant_id <> ALL ((SELECT coalesce(array_agg(tp.tenant_id), '{}')
                                              FROM owed_tenant_pauses tp)::text[])
                 LIMIT p_limit) f
         GROUP BY f.tenant_id, f.channel) g
 GROUP BY 1, 2
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_sweep_in_flight(p_now timestamptz, p_horizon timestamptz, p_live_until timestamptz,
                                     p_channels text[], p_accounts integer[], p_limit integer)
RETURNS TABLE (tenant_id text, account integer, due_now bigint, due_by_horizon bigint)
LANGUAGE sql STABLE AS $$
SELECT f.tenant_id, owed_sweep_account_of(f.channel, p_channels, p_accounts),
       count(*) FILTER (WHERE greatest(f.due_at, f.not_before) <= p_now), count(*)
  FROM (SELECT o.tenant_id, o.channel, o.due_at, o.not_before FROM owed_notifications o
         WHERE o.state IN ('leased', 'queued', 'sending')
           AND o.lease_until > p_now AND o.lease_until <= p_live_until AND o.due_at <= p_horizon
           AND NOT coalesce(owed_handed_back(o.state, o.lease_until, o.not_before), false)
           AND NOT EXISTS (SELECT FROM owed_tenant_pauses tp WHERE tp.tenant_id = o.tenant_id)
         LIMIT p_limit) f
 GROUP BY 1, 2
$$;
-- +goose StatementEnd
