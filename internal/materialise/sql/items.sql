-- owed_items: the documented table an application fills with upcoming
-- items (calendar events, follow-ups) for the materialiser to turn into
-- ledger rows. POST /cron/materialise reads the items starting within the
-- look-ahead window (OWED_LOOKAHEAD) and schedules one notification per
-- item, due at starts_at - lead_seconds (or OWED_DEFAULT_LEAD when
-- lead_seconds is NULL) and expiring at starts_at, and each run reconciles
-- the nudges it wrote with their items (reconcile.go): an item that moved,
-- changed its lead, was cancelled or went away moves or cancels its nudge.
-- See docs/api.md.
CREATE TABLE owed_items (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    recipient    text        NOT NULL CHECK (recipient <> '' AND octet_length(recipient) <= 512),
    channel      text        NOT NULL CHECK (channel <> '' AND octet_length(channel) <= 64),
    kind         text        NOT NULL CHECK (kind <> '' AND octet_length(kind) <= 128),
    ref_id       text        NOT NULL CHECK (ref_id <> '' AND octet_length(ref_id) <= 256),
    starts_at    timestamptz NOT NULL,
    -- The item's own "remind me N seconds before"; NULL takes
    -- OWED_DEFAULT_LEAD. Capped at a week: a lead longer than the
    -- look-ahead window is only noticed once the item enters the window, so
    -- it would fire late anyway.
    lead_seconds integer     CHECK (lead_seconds IS NULL OR lead_seconds BETWEEN 0 AND 604800),
    payload      jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (octet_length(payload::text) <= 65536),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- An application that keeps a cancelled item rather than deleting it
    -- sets this: the item is not materialised again, and its nudge still
    -- owed is cancelled, exactly as for a deleted item.
    cancelled_at timestamptz,
    -- One item per recipient and subject, so an application can upsert
    -- (INSERT ... ON CONFLICT ON CONSTRAINT owed_items_key DO UPDATE).
    CONSTRAINT owed_items_key UNIQUE (tenant_id, recipient, kind, ref_id),
    -- Its times are ones every reader can hold (owed_time_in_range,
    -- internal/ledger/sql/notifications.sql): one item starting at infinity
    -- would otherwise fail the materialiser's read for every tenant.
    CONSTRAINT owed_items_starts_at_in_range CHECK (owed_time_in_range(starts_at)),
    CONSTRAINT owed_items_times_in_range CHECK (
        owed_time_in_range(created_at) AND owed_time_in_range(updated_at) AND owed_time_in_range(cancelled_at))
);

-- The materialiser's window scan: items starting within the look-ahead.
CREATE INDEX owed_items_starts_at ON owed_items (starts_at);

-- An application writes its items in its tenant's scope; only the
-- materialiser's functions below read across tenants.
ALTER TABLE owed_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_items FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_items_tenant ON owed_items TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
-- An owed_apps login sees and writes only a tenant it names and is bound
-- to (owed_apps_tenant, internal/apps/sql/logins.sql).
CREATE POLICY owed_items_apps ON owed_items TO owed_apps
    USING (tenant_id = (SELECT owed_apps_tenant()))
    WITH CHECK (tenant_id = (SELECT owed_apps_tenant()));
CREATE POLICY owed_items_owner ON owed_items TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY owed_items_definer ON owed_items TO owed_definer USING (true);

GRANT SELECT, INSERT, UPDATE, DELETE ON owed_items TO owed_runtime, owed_apps;
GRANT SELECT ON owed_items TO owed_definer;

-- owed_materialise_upcoming is the materialiser's read across tenants: the
-- items not cancelled that start in (p_from, p_to], with their id, so the
-- materialiser does not schedule again an item whose nudge the
-- reconciliation already holds.
CREATE FUNCTION owed_materialise_upcoming(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               starts_at timestamptz, lead_seconds integer, payload jsonb)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
SELECT i.id, i.tenant_id, i.recipient, i.channel, i.kind, i.ref_id, i.starts_at, i.lead_seconds, i.payload
  FROM owed_items i
 WHERE i.starts_at > $1 AND i.starts_at <= $2 AND i.cancelled_at IS NULL
 ORDER BY i.tenant_id, i.starts_at, i.id
$$;
ALTER FUNCTION owed_materialise_upcoming(timestamptz, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_materialise_upcoming(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_materialise_upcoming(timestamptz, timestamptz) TO owed_runtime;

-- owed_materialise_nudges is the reconciliation's read across tenants:
-- each materialised row still owed and not expired, with the due time and
-- expiry it is headed for (a reschedule waiting on a send in flight counts
-- as done; an intent waits while its outcome is NULL, intents.sql), the
-- due time being the one asked for when quiet hours hold the row (held_from,
-- intent_held_from): the item asked for that time, and a held nudge is
-- where its item wants it,
-- whether a cancel is waiting on it, and its item's id, starts_at,
-- lead_seconds and whether it is cancelled (NULLs when the item was
-- deleted). Never a recipient or a payload.
CREATE FUNCTION owed_materialise_nudges(p_now timestamptz)
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
ALTER FUNCTION owed_materialise_nudges(timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_materialise_nudges(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_materialise_nudges(timestamptz) TO owed_runtime;
