-- The materialiser follows its items (issue 17). Until now it only added
-- rows: an item that moved, changed its lead or went away left its nudge at
-- the old time. Each run now also reconciles the nudges it wrote with their
-- items (internal/materialise, reconcile.go), and needs three things for it:
--
--   owed_notifications.materialised  marks a row the materialiser wrote (or
--                     found at the time an item asks for) for the item of the
--                     same (tenant_id, recipient, kind, ref_id), the key of
--                     owed_items (owed_items_key). That key is already on the
--                     row; the mark tells a nudge that follows its item from
--                     a row an application scheduled through the API for the
--                     same subject, which the materialiser never changes.
--                     The partial index is what the reconciliation reads:
--                     the marked rows still owed, by expiry, so its cost
--                     follows the nudges still owed, not the ledger.
--   owed_items.cancelled_at   an application that keeps a cancelled item
--                     (rather than deleting it) sets this: the item is not
--                     materialised again, and its nudge still owed is
--                     cancelled, exactly as for a deleted item.
--   owed_materialise_nudges   the cross-tenant read behind it, a SECURITY
--                     DEFINER function like owed_materialise_upcoming
--                     (migrations/00019): each marked row still owed and not
--                     expired, with the due time and expiry it is headed for
--                     (a reschedule waiting on a send in flight counts as
--                     done: migrations/00013), whether a cancel is waiting on
--                     it, and its item's id, starts_at, lead_seconds and
--                     whether it is cancelled (NULLs when the item was
--                     deleted). Never a recipient or a payload.
--
-- owed_materialise_upcoming gains the item's id (the materialiser does not
-- schedule again an item whose nudge the reconciliation already holds) and
-- leaves out cancelled items. Its result type changes, so it is dropped and
-- created again, and handed to owed_definer again.
--
-- Adding a column with a constant default is a change to the catalogue
-- alone; the partial index reads the table once and holds no row until the
-- materialiser marks one.

-- +goose Up
ALTER TABLE owed_notifications ADD COLUMN materialised boolean NOT NULL DEFAULT false;
CREATE INDEX owed_notifications_materialised_owed ON owed_notifications (expires_at)
    WHERE materialised AND settled_at IS NULL;

ALTER TABLE owed_items ADD COLUMN cancelled_at timestamptz;

GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_materialise_upcoming(timestamptz, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;

-- +goose StatementBegin
CREATE FUNCTION owed_materialise_upcoming(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               starts_at timestamptz, lead_seconds integer, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT i.id, i.tenant_id, i.recipient, i.channel, i.kind, i.ref_id, i.starts_at, i.lead_seconds, i.payload
  FROM owed_items i
 WHERE i.starts_at > $1 AND i.starts_at <= $2 AND i.cancelled_at IS NULL
 ORDER BY i.tenant_id, i.starts_at, i.id
$$;
-- +goose StatementEnd

-- A waiting intent is one whose outcome is still NULL (migrations/00013):
-- the row is being sent, and the intent applies when the send ends.
-- +goose StatementBegin
CREATE FUNCTION owed_materialise_nudges(p_now timestamptz)
RETURNS TABLE (id bigint, tenant_id text, due_at timestamptz, expires_at timestamptz, cancelling boolean,
               moving boolean, item_id bigint, starts_at timestamptz, lead_seconds integer,
               item_cancelled boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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

CALL owed_definer_takes_functions(ARRAY['owed_materialise_upcoming', 'owed_materialise_nudges']);

-- +goose Down
GRANT owed_definer TO CURRENT_USER;
DROP FUNCTION owed_materialise_nudges(timestamptz);
DROP FUNCTION owed_materialise_upcoming(timestamptz, timestamptz);
REVOKE owed_definer FROM CURRENT_USER;

-- +goose StatementBegin
CREATE FUNCTION owed_materialise_upcoming(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, recipient text, channel text, kind text, ref_id text, starts_at timestamptz,
               lead_seconds integer, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT i.tenant_id, i.recipient, i.channel, i.kind, i.ref_id, i.starts_at, i.lead_seconds, i.payload
  FROM owed_items i
 WHERE i.starts_at > $1 AND i.starts_at <= $2
 ORDER BY i.tenant_id, i.starts_at, i.id
$$;
-- +goose StatementEnd
CALL owed_definer_takes_functions(ARRAY['owed_materialise_upcoming']);

ALTER TABLE owed_items DROP COLUMN cancelled_at;
DROP INDEX owed_notifications_materialised_owed;
ALTER TABLE owed_notifications DROP COLUMN materialised;
