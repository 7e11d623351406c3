-- Every table owed owns carries the owed_ prefix, as owed_items and
-- owed_contacts already did, so the schema reads as one product beside an
-- application's own tables (one name per idea: the ledger is
-- owed_notifications, its attempts owed_notification_attempts). Renaming keeps
-- the rows, indexes, policies and grants; the two worker functions name their
-- tables in their bodies, so they are replaced with the new names (and put
-- back on the way down).

-- +goose Up
ALTER TABLE notifications RENAME TO owed_notifications;
ALTER TABLE notification_attempts RENAME TO owed_notification_attempts;
ALTER TABLE api_tokens RENAME TO owed_api_tokens;
ALTER TABLE provider_pace RENAME TO owed_provider_pace;
ALTER TABLE provider_limited_minutes RENAME TO owed_provider_limited_minutes;

-- Constraints and indexes named after their table follow it (renaming an
-- index-backed constraint renames its index too, so constraints go first).
-- +goose StatementBegin
DO $$
DECLARE
    pair text[];
    r record;
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[ARRAY['notifications', 'owed_notifications'], ARRAY['notification_attempts', 'owed_notification_attempts'], ARRAY['api_tokens', 'owed_api_tokens'], ARRAY['provider_pace', 'owed_provider_pace'], ARRAY['provider_limited_minutes', 'owed_provider_limited_minutes']] LOOP
        FOR r IN SELECT conname FROM pg_constraint
                 WHERE conrelid = to_regclass(pair[2]) AND conname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', pair[2], r.conname,
                           pair[2] || substr(r.conname, length(pair[1]) + 1));
        END LOOP;
        FOR r IN SELECT indexname FROM pg_indexes
                 WHERE schemaname = current_schema() AND tablename = pair[2] AND indexname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.indexname,
                           pair[2] || substr(r.indexname, length(pair[1]) + 1));
        END LOOP;
        FOR r IN SELECT policyname FROM pg_policies
                 WHERE schemaname = current_schema() AND tablename = pair[2] AND policyname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER POLICY %I ON %I RENAME TO %I', r.policyname, pair[2],
                           pair[2] || substr(r.policyname, length(pair[1]) + 1));
        END LOOP;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        UPDATE owed_notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, settled_at = NULL,
               updated_at = p_now
          FROM cur
         WHERE n.id = cur.id
           AND (cur.settled_at IS NULL OR cur.state = 'failed')
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id
    )
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, cur.payload, cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_settle_delivered(p_tenant text, p_id bigint, p_provider text, p_started timestamptz,
                                      p_now timestamptz, p_message_id text, p_http_status integer,
                                      p_possible_duplicate boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    changed boolean;
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- "open" is read before the update: only an open row (or a failed one an
    -- operator redrove) is stamped delivered; an already delivered row keeps
    -- its first delivered_at and message id.
    WITH old AS (
        SELECT n.id, (n.settled_at IS NULL OR n.state = 'failed') AS open
          FROM owed_notifications n WHERE n.id = p_id FOR UPDATE
    ), settled AS (
        UPDATE owed_notifications n
           SET attempts = n.attempts + 1, updated_at = p_now,
               state = CASE WHEN old.open THEN 'delivered' ELSE n.state END,
               delivered_at = CASE WHEN old.open THEN p_now ELSE n.delivered_at END,
               settled_at = CASE WHEN old.open THEN p_now ELSE n.settled_at END,
               lease_until = CASE WHEN old.open THEN NULL ELSE n.lease_until END,
               provider = CASE WHEN old.open THEN p_provider ELSE n.provider END,
               provider_message_id = CASE WHEN old.open THEN p_message_id ELSE n.provider_message_id END,
               last_error = CASE WHEN old.open THEN NULL ELSE n.last_error END
          FROM old
         WHERE n.id = old.id
        RETURNING n.id, n.tenant_id, n.attempts, old.open AS changed
    ), recorded AS (
        INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                           finished_at, outcome, provider_message_id, http_status, error,
                                           possible_duplicate)
        SELECT id, tenant_id, attempts, p_provider, p_started, p_now, 'accepted', p_message_id,
               p_http_status, NULL, p_possible_duplicate
          FROM settled
    )
    SELECT settled.changed INTO changed FROM settled;
    RETURN changed;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE owed_notifications RENAME TO notifications;
ALTER TABLE owed_notification_attempts RENAME TO notification_attempts;
ALTER TABLE owed_api_tokens RENAME TO api_tokens;
ALTER TABLE owed_provider_pace RENAME TO provider_pace;
ALTER TABLE owed_provider_limited_minutes RENAME TO provider_limited_minutes;

-- Constraints and indexes named after their table follow it (renaming an
-- index-backed constraint renames its index too, so constraints go first).
-- +goose StatementBegin
DO $$
DECLARE
    pair text[];
    r record;
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[ARRAY['owed_notifications', 'notifications'], ARRAY['owed_notification_attempts', 'notification_attempts'], ARRAY['owed_api_tokens', 'api_tokens'], ARRAY['owed_provider_pace', 'provider_pace'], ARRAY['owed_provider_limited_minutes', 'provider_limited_minutes']] LOOP
        FOR r IN SELECT conname FROM pg_constraint
                 WHERE conrelid = to_regclass(pair[2]) AND conname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', pair[2], r.conname,
                           pair[2] || substr(r.conname, length(pair[1]) + 1));
        END LOOP;
        FOR r IN SELECT indexname FROM pg_indexes
                 WHERE schemaname = current_schema() AND tablename = pair[2] AND indexname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.indexname,
                           pair[2] || substr(r.indexname, length(pair[1]) + 1));
        END LOOP;
        FOR r IN SELECT policyname FROM pg_policies
                 WHERE schemaname = current_schema() AND tablename = pair[2] AND policyname LIKE pair[1] || '\_%' LOOP
            EXECUTE format('ALTER POLICY %I ON %I RENAME TO %I', r.policyname, pair[2],
                           pair[2] || substr(r.policyname, length(pair[1]) + 1));
        END LOOP;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_claim(p_tenant text, p_id bigint, p_now timestamptz, p_lease_until timestamptz,
                           p_due timestamptz, p_latest_due timestamptz)
RETURNS TABLE (id bigint, tenant_id text, recipient text, channel text, kind text, ref_id text,
               due_at timestamptz, expires_at timestamptz, payload jsonb, state text, attempts integer,
               lease_until timestamptz, claimed_at timestamptz, published_at timestamptz,
               delivered_at timestamptz, settled_at timestamptz, provider text, provider_message_id text,
               last_error text, created_at timestamptz, updated_at timestamptz, took boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    RETURN QUERY
    WITH cur AS (
        SELECT n.* FROM notifications n WHERE n.id = p_id FOR UPDATE
    ), taken AS (
        UPDATE notifications n
           SET state = 'sending', claimed_at = p_now, lease_until = p_lease_until, settled_at = NULL,
               updated_at = p_now
          FROM cur
         WHERE n.id = cur.id
           AND (cur.settled_at IS NULL OR cur.state = 'failed')
           AND cur.due_at = p_due
           AND (cur.expires_at IS NULL OR cur.expires_at > p_now)
           AND (cur.state <> 'sending' OR cur.lease_until <= p_now)
           AND cur.due_at <= p_latest_due
        RETURNING n.id
    )
    SELECT cur.id, cur.tenant_id, cur.recipient, cur.channel, cur.kind, cur.ref_id, cur.due_at,
           cur.expires_at, cur.payload, cur.state, cur.attempts, cur.lease_until, cur.claimed_at,
           cur.published_at, cur.delivered_at, cur.settled_at, cur.provider, cur.provider_message_id,
           cur.last_error, cur.created_at, cur.updated_at, EXISTS (SELECT 1 FROM taken)
      FROM cur;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION owed_settle_delivered(p_tenant text, p_id bigint, p_provider text, p_started timestamptz,
                                      p_now timestamptz, p_message_id text, p_http_status integer,
                                      p_possible_duplicate boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    changed boolean;
BEGIN
    PERFORM set_config('owed.tenant_id', p_tenant, true);
    -- "open" is read before the update: only an open row (or a failed one an
    -- operator redrove) is stamped delivered; an already delivered row keeps
    -- its first delivered_at and message id.
    WITH old AS (
        SELECT n.id, (n.settled_at IS NULL OR n.state = 'failed') AS open
          FROM notifications n WHERE n.id = p_id FOR UPDATE
    ), settled AS (
        UPDATE notifications n
           SET attempts = n.attempts + 1, updated_at = p_now,
               state = CASE WHEN old.open THEN 'delivered' ELSE n.state END,
               delivered_at = CASE WHEN old.open THEN p_now ELSE n.delivered_at END,
               settled_at = CASE WHEN old.open THEN p_now ELSE n.settled_at END,
               lease_until = CASE WHEN old.open THEN NULL ELSE n.lease_until END,
               provider = CASE WHEN old.open THEN p_provider ELSE n.provider END,
               provider_message_id = CASE WHEN old.open THEN p_message_id ELSE n.provider_message_id END,
               last_error = CASE WHEN old.open THEN NULL ELSE n.last_error END
          FROM old
         WHERE n.id = old.id
        RETURNING n.id, n.tenant_id, n.attempts, old.open AS changed
    ), recorded AS (
        INSERT INTO notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
                                           finished_at, outcome, provider_message_id, http_status, error,
                                           possible_duplicate)
        SELECT id, tenant_id, attempts, p_provider, p_started, p_now, 'accepted', p_message_id,
               p_http_status, NULL, p_possible_duplicate
          FROM settled
    )
    SELECT settled.changed INTO changed FROM settled;
    RETURN changed;
END
$$;
-- +goose StatementEnd
