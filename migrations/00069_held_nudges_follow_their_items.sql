-- A materialised nudge held for quiet hours (issue 31) follows its item by
-- the due time it asked for: owed_materialise_nudges reports held_from (or
-- a waiting reschedule's intent_held_from) as the nudge's due time, so a
-- run over an unchanged item leaves a held nudge alone. Before, each run
-- saw the opening, took it for a moved nudge and moved it back into the
-- quiet hours, where it was sent.
--
-- Expand-only: a new body of the same function, with the same columns,
-- owner and grants. Replacing a function owed_definer owns takes
-- membership of it, for the migration alone.

-- +goose Up
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_materialise_nudges(p_now timestamptz)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, expires_at timestamptz, cancelling boolean,
               moving boolean, item_id bigint, starts_at timestamptz, lead_seconds integer,
               item_cancelled boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT n.id, n.tenant_id,
       CASE WHEN w.intent = 'reschedule' THEN coalesce(n.intent_held_from, n.intent_due_at)
            ELSE coalesce(n.held_from, n.due_at) END,
       CASE WHEN w.intent = 'reschedule' THEN n.intent_expires_at ELSE n.expires_at END,
       w.intent IS NOT DISTINCT FROM 'cancel', w.intent IS NOT DISTINCT FROM 'reschedule',
       i.id, i.starts_at, i.lead_seconds, i.cancelled_at IS NOT NULL
  FROM owed_notifications n
 CROSS JOIN LATERAL (SELECT CASE WHEN n.intent_outcome IS NULL THEN n.intent END AS intent) w
  LEFT JOIN owed_items i
         ON i.tenant_id = n.tenant_id AND i.recipient = n.recipient AND i.kind = n.kind AND i.ref_id = n.ref_id
 WHERE n.materialised AND n.settled_at IS NULL AND n.expires_at > coalesce($1, now())
 ORDER BY n.tenant_id, n.id
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_materialise_nudges(p_now timestamptz)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, expires_at timestamptz, cancelling boolean,
               moving boolean, item_id bigint, starts_at timestamptz, lead_seconds integer,
               item_cancelled boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT n.id, n.tenant_id,
       CASE WHEN w.intent = 'reschedule' THEN n.intent_due_at ELSE n.due_at END,
       CASE WHEN w.intent = 'reschedule' THEN n.intent_expires_at ELSE n.expires_at END,
       w.intent IS NOT DISTINCT FROM 'cancel', w.intent IS NOT DISTINCT FROM 'reschedule',
       i.id, i.starts_at, i.lead_seconds, i.cancelled_at IS NOT NULL
  FROM owed_notifications n
 CROSS JOIN LATERAL (SELECT CASE WHEN n.intent_outcome IS NULL THEN n.intent END AS intent) w
  LEFT JOIN owed_items i
         ON i.tenant_id = n.tenant_id AND i.recipient = n.recipient AND i.kind = n.kind AND i.ref_id = n.ref_id
 WHERE n.materialised AND n.settled_at IS NULL AND n.expires_at > coalesce($1, now())
 ORDER BY n.tenant_id, n.id
$$;
-- +goose StatementEnd
REVOKE owed_definer FROM CURRENT_USER;
