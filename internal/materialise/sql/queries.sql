-- Every statement the materialiser runs (internal/materialise), by name;
-- sql.go binds each to a variable when the package is initialised. Both
-- read across tenants through a SECURITY DEFINER function of items.sql.

-- name: Upcoming
-- Upcoming is a range scan of owed_items_starts_at, ordered by tenant,
-- starts_at and id: the order makes a run's batches, and so its log,
-- reproducible. Cancelled items are left out.
SELECT id, tenant_id, recipient, channel, kind, ref_id, starts_at, lead_seconds, payload
  FROM owed_materialise_upcoming($1, $2)

-- name: Nudges
-- Nudges reads owed_notifications_materialised_owed from $1 (the
-- rows the materialiser marked, still owed and not expired), each
-- joined to its item by owed_items_key, ordered by tenant and id. A row
-- whose item was deleted comes back with a NULL item. It answers no
-- recipient and no payload.
SELECT id, tenant_id, due_at, expires_at, cancelling, moving, item_id, starts_at, lead_seconds, item_cancelled
  FROM owed_materialise_nudges($1)

