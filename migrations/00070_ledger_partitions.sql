-- The ledger partitioned by month, in place (docs/scale.md, "Time
-- partitions"; the steps, their locks and the downtime in docs/upgrade.md).
-- owed_notifications becomes PARTITION BY RANGE (id), each range 10^11 ids
-- opened for one month (owed_ledger_partitions_ensure, notifications.sql),
-- and owed_notification_attempts and owed_receipts PARTITION BY RANGE
-- (notification_id) on the same ranges; each table as it was is attached
-- whole as its partition *_legacy, never rewritten. The schedule key moves
-- to owed_notification_keys, kept by a trigger; the attempts and receipts
-- lose their foreign keys to the ledger (attempts.sql says why), and their
-- keys take the row's id. Expand-only: the ledger keeps a constraint named
-- owed_notifications_schedule_key (the key with the id) so the previous
-- release's ON CONFLICT ON CONSTRAINT still runs, and the keys' trigger
-- skips a taken key as that ON CONFLICT did.
--
-- No transaction: each step commits on its own, so delivery goes on
-- between them, and only the swap (step 3) takes an exclusive lock, for
-- the time a few catalog changes take.

-- +goose NO TRANSACTION
-- +goose Up

-- Step 1: the keys, kept AFTER each write of the unpartitioned table while
-- they are backfilled (its own unique key still decides), and the
-- partitions' functions.
CREATE TABLE owed_notification_keys (
    tenant_id       text        NOT NULL,
    recipient       text        NOT NULL,
    kind            text        NOT NULL,
    ref_id          text        NOT NULL,
    due_at          timestamptz NOT NULL,
    notification_id bigint      NOT NULL,
    CONSTRAINT owed_notification_keys_pkey PRIMARY KEY (tenant_id, recipient, kind, ref_id, due_at)
);
CREATE UNIQUE INDEX owed_notification_keys_notification ON owed_notification_keys (notification_id);

ALTER TABLE owed_notification_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_notification_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY owed_notification_keys_definer ON owed_notification_keys TO owed_definer USING (true) WITH CHECK (true);
CREATE POLICY owed_notification_keys_owner ON owed_notification_keys TO CURRENT_USER USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_notification_keys TO owed_definer;
-- +goose StatementBegin
CREATE FUNCTION owed_notification_key_keep() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO owed_notification_keys (tenant_id, recipient, kind, ref_id, due_at, notification_id)
        VALUES (NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at, NEW.id)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND AND TG_WHEN = 'BEFORE' THEN
            RETURN NULL;
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM owed_notification_keys WHERE notification_id = OLD.id;
        RETURN OLD;
    END IF;
    INSERT INTO owed_notification_keys (tenant_id, recipient, kind, ref_id, due_at, notification_id)
    VALUES (NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at, OLD.id)
    ON CONFLICT (notification_id) DO UPDATE
       SET tenant_id = excluded.tenant_id, recipient = excluded.recipient, kind = excluded.kind,
           ref_id = excluded.ref_id, due_at = excluded.due_at;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_month_first_id(p_month date) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT ((extract(year FROM p_month)::bigint - 2000) * 12 + extract(month FROM p_month)::bigint - 1) * 100000000000
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_partitions()
RETURNS TABLE (parent text, partition text, from_id bigint, to_id bigint, est_rows bigint, bytes bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
SELECT p.relname::text,
       c.relname::text,
       nullif(b[1], 'MINVALUE')::bigint,
       nullif(b[2], 'MAXVALUE')::bigint,
       greatest(c.reltuples, 0)::bigint,
       pg_total_relation_size(c.oid)
  FROM pg_inherits i
  JOIN pg_class p ON p.oid = i.inhparent
  JOIN pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''?([^'')]+)''?\) TO \(''?([^'')]+)''?\)') AS b
 WHERE i.inhparent IN (to_regclass('owed_notifications'), to_regclass('owed_notification_attempts'),
                       to_regclass('owed_receipts'))
 ORDER BY 3 NULLS FIRST, array_position(ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'],
                                        p.relname::text)
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions() FROM PUBLIC;
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_partition_name_indexes(p_partition text, p_suffix text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS index_name, p.relname AS parent_name
               FROM pg_index x
               JOIN pg_class c ON c.oid = x.indexrelid
               JOIN pg_inherits i ON i.inhrelid = x.indexrelid
               JOIN pg_class p ON p.oid = i.inhparent
              WHERE x.indrelid = to_regclass('public.' || quote_ident(p_partition)) LOOP
        EXECUTE format('ALTER INDEX public.%I RENAME TO %I', r.index_name, r.parent_name || '_' || p_suffix);
    END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_partition_name_indexes(text, text) FROM PUBLIC;
-- +goose StatementBegin
CREATE FUNCTION owed_ledger_partitions_ensure(p_now timestamptz, p_ahead integer)
RETURNS TABLE (partition_name text, first_id bigint, end_id bigint, created boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    v_month date := date_trunc('month', p_now AT TIME ZONE 'UTC')::date;
    v_at date;
    v_from bigint;
    v_to bigint;
    v_last bigint;
    v_table text;
    v_seq text := pg_get_serial_sequence('owed_notifications', 'id');
    v_member boolean := pg_has_role(current_user, 'owed_definer', 'MEMBER');
BEGIN
    IF p_ahead IS NULL OR p_ahead < 0 OR p_ahead > 24 THEN
        RAISE EXCEPTION 'owed_ledger_partitions_ensure: p_ahead %: want 0 to 24 months', p_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two runs at once would race to create the same partition.
    PERFORM pg_advisory_xact_lock(hashtext('owed_ledger_partitions_ensure'));
    -- A partition made or attached takes a copy of each of its parent's
    -- triggers, which checks EXECUTE on the trigger's function: owed_definer's
    -- (revoked from PUBLIC), so the owner holds the role for the call alone,
    -- as owed_definer_takes_functions does (roles.sql).
    IF NOT v_member THEN
        GRANT owed_definer TO CURRENT_USER;
    END IF;
    FOR i IN 0 .. p_ahead LOOP
        v_at := (v_month + make_interval(months => i))::date;
        v_from := owed_ledger_month_first_id(v_at);
        v_to := v_from + 100000000000;
        FOREACH v_table IN ARRAY ARRAY['owed_notifications', 'owed_notification_attempts', 'owed_receipts'] LOOP
            partition_name := v_table || '_' || to_char(v_at, '"y"YYYY"m"MM');
            first_id := v_from;
            end_id := v_to;
            created := false;
            -- A range a partition covers already (the legacy partition of
            -- an upgrade reaches to its month's start) is left as it is.
            IF NOT EXISTS (SELECT 1 FROM owed_ledger_partitions() p
                            WHERE p.parent = v_table
                              AND coalesce(p.from_id < v_to, true) AND coalesce(p.to_id > v_from, true)) THEN
                EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%s) TO (%s)',
                               partition_name, v_table, v_from, v_to);
            PERFORM owed_ledger_partition_name_indexes(partition_name, to_char(v_at, '"y"YYYY"m"MM'));
                IF v_table = 'owed_notifications' THEN
                    EXECUTE format('ALTER TABLE %I SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, '
                                   'autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.01, '
                                   'autovacuum_analyze_scale_factor = 0.01)', partition_name);
                ELSIF v_table = 'owed_notification_attempts' THEN
                    EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_insert_scale_factor = 0.01, '
                                   'autovacuum_analyze_scale_factor = 0.01)', partition_name);
                END IF;
                EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', partition_name);
                EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', partition_name);
                created := true;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    EXECUTE format('SELECT last_value FROM %s', v_seq) INTO v_last;
    v_from := owed_ledger_month_first_id(v_month);
    IF v_last < v_from AND (SELECT count(*) FROM owed_ledger_partitions() p
                             WHERE coalesce(p.from_id <= v_from, true) AND p.to_id > v_from) = 3 THEN
        PERFORM setval(v_seq, v_from, false);
    END IF;
    IF NOT v_member THEN
        REVOKE owed_definer FROM CURRENT_USER;
    END IF;
END
$$;
-- +goose StatementEnd
REVOKE EXECUTE ON FUNCTION owed_ledger_partitions_ensure(timestamptz, integer) FROM PUBLIC;
CREATE TRIGGER owed_notifications_key_insert
    AFTER INSERT ON owed_notifications
    FOR EACH ROW
    EXECUTE FUNCTION owed_notification_key_keep();
CREATE TRIGGER owed_notifications_key_update
    AFTER UPDATE ON owed_notifications
    FOR EACH ROW
    WHEN ((NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at)
          IS DISTINCT FROM (OLD.tenant_id, OLD.recipient, OLD.kind, OLD.ref_id, OLD.due_at))
    EXECUTE FUNCTION owed_notification_key_keep();
CREATE TRIGGER owed_notifications_key_delete
    AFTER DELETE ON owed_notifications
    FOR EACH ROW
    EXECUTE FUNCTION owed_notification_key_keep();
REVOKE EXECUTE ON FUNCTION owed_notification_key_keep() FROM PUBLIC;
CALL owed_definer_takes_functions(ARRAY[]::text[]);

-- The backfill, 10,000 rows a transaction, in id order up to the last id
-- when it starts (the trigger writes the keys of the rows after it; ids
-- may be far apart, as after a rollback of this migration). FOR KEY SHARE
-- waits for a reschedule of a row in flight and reads its new key, and the
-- trigger writes the key of every row changed meanwhile, so the two agree
-- whichever comes first.
-- +goose StatementBegin
DO $$
DECLARE
    v_last bigint := -1;
    v_next bigint;
    v_max bigint;
BEGIN
    SELECT max(id) INTO v_max FROM owed_notifications;
    LOOP
        WITH batch AS (
            SELECT tenant_id, recipient, kind, ref_id, due_at, id FROM owed_notifications
             WHERE id > v_last AND id <= v_max ORDER BY id LIMIT 10000 FOR KEY SHARE
        ), ins AS (
            INSERT INTO owed_notification_keys (tenant_id, recipient, kind, ref_id, due_at, notification_id)
            SELECT tenant_id, recipient, kind, ref_id, due_at, id FROM batch
            ON CONFLICT DO NOTHING
        )
        SELECT max(id) INTO v_next FROM batch;
        EXIT WHEN v_next IS NULL;
        v_last := v_next;
        COMMIT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Step 2: every id of the ledger, and every row id of its attempts and
-- receipts, is below the first id of this month's range, checked without
-- a lock that stops reads or writes (VALIDATE takes SHARE UPDATE
-- EXCLUSIVE), so attaching them later scans nothing; and the unique
-- indexes the parents' keys attach to, built CONCURRENTLY.
-- +goose StatementBegin
DO $$
DECLARE
    v_n bigint := owed_ledger_month_first_id((now() AT TIME ZONE 'UTC')::date);
    v_max bigint;
BEGIN
    -- Ids of this month's range or past it (a ledger upgraded before and
    -- rolled back keeps its rows' ids) stay below the bound too: it is then
    -- the end of the range of the highest id, and the legacy partition
    -- takes the rest of that month's rows.
    SELECT max(id) INTO v_max FROM owed_notifications;
    IF v_max >= v_n THEN
        v_n := (v_max / 100000000000 + 1) * 100000000000;
    END IF;
    EXECUTE format('ALTER TABLE owed_notifications ADD CONSTRAINT owed_notifications_legacy_bound '
                   'CHECK (id < %s) NOT VALID', v_n);
    EXECUTE format('ALTER TABLE owed_notification_attempts ADD CONSTRAINT owed_notification_attempts_legacy_bound '
                   'CHECK (notification_id < %s) NOT VALID', v_n);
    EXECUTE format('ALTER TABLE owed_receipts ADD CONSTRAINT owed_receipts_legacy_bound '
                   'CHECK (notification_id < %s) NOT VALID', v_n);
END
$$;
-- +goose StatementEnd
ALTER TABLE owed_notifications VALIDATE CONSTRAINT owed_notifications_legacy_bound;
ALTER TABLE owed_notification_attempts VALIDATE CONSTRAINT owed_notification_attempts_legacy_bound;
ALTER TABLE owed_receipts VALIDATE CONSTRAINT owed_receipts_legacy_bound;
CREATE UNIQUE INDEX CONCURRENTLY owed_notifications_legacy_schedule_key_id
    ON owed_notifications (tenant_id, recipient, kind, ref_id, due_at, id);
CREATE UNIQUE INDEX CONCURRENTLY owed_notification_attempts_legacy_pkey_next
    ON owed_notification_attempts (notification_id, id);
CREATE UNIQUE INDEX CONCURRENTLY owed_receipts_legacy_pkey_next ON owed_receipts (notification_id, id);
CREATE UNIQUE INDEX CONCURRENTLY owed_receipts_legacy_replay_next ON owed_receipts
    (provider, provider_message_id, status, (coalesce(occurred_at, '-infinity'::timestamptz)), notification_id);

-- Step 3, the swap, in one transaction under one exclusive lock: each
-- table becomes *_legacy (its indexes and constraints renamed to match,
-- its triggers, identity, foreign keys and grants dropped: the parent's
-- apply), the partitioned parents are created as their homes define them,
-- each legacy table is attached below the bound step 2 validated (no scan:
-- every index of a parent matches one of the legacy table's), this
-- month's partitions and the next month's are created and the ids moved
-- to this month's range, and the undeliverable marks' foreign key points
-- at the new ledger, validated in step 4.
-- +goose StatementBegin
DO $swap$
DECLARE
    v_n bigint;
    v_index record;
    v_last bigint;
    v_called boolean;
    v_checks text[];
    v_nv_names text[];
    v_nv_defs text[];
    v_timeout text;
BEGIN
    GRANT owed_definer TO CURRENT_USER;
    -- The lock is taken whole or not at all: a wait is cut short at half a
    -- second (the statements queued behind it wait no longer) and a
    -- deadlock with a serving transaction that holds one of the tables is
    -- given up; either is tried again, 200 times at most.
    v_timeout := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR v_try IN 1 .. 200 LOOP
        BEGIN
            LOCK TABLE owed_notifications, owed_notification_attempts, owed_receipts, owed_undeliverable
                IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            IF v_try = 200 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
    SELECT substring(pg_get_constraintdef(k.oid) FROM '([0-9]+)')::bigint INTO STRICT v_n
      FROM pg_constraint k
     WHERE k.conrelid = 'owed_notifications'::regclass AND k.conname = 'owed_notifications_legacy_bound';
    ALTER TABLE owed_notification_attempts DROP CONSTRAINT owed_notification_attempts_notification_id_fkey;
    ALTER TABLE owed_receipts DROP CONSTRAINT owed_receipts_notification_id_fkey;
    ALTER TABLE owed_undeliverable DROP CONSTRAINT owed_undeliverable_notification_id_fkey;

    ALTER TABLE owed_notifications RENAME TO owed_notifications_legacy;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_notifications_legacy'::regclass AND c.relname NOT LIKE '%legacy%' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname, v_index.relname || '_legacy');
    END LOOP;
    DROP TRIGGER owed_notifications_due_inserted ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_due_updated ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_default_grace ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_apply_intent ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_key_insert ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_key_update ON owed_notifications_legacy;
    DROP TRIGGER owed_notifications_key_delete ON owed_notifications_legacy;
    -- A trigger with transition tables may not be a partition's: the
    -- per-minute counters' triggers move to the parent (minutes.sql).
    DROP TRIGGER owed_ledger_minutes_inserted ON owed_notifications_legacy;
    DROP TRIGGER owed_ledger_minutes_updated ON owed_notifications_legacy;
    ALTER TABLE owed_notifications_legacy ALTER COLUMN id DROP IDENTITY;
    ALTER TABLE owed_notifications_legacy ADD CONSTRAINT owed_notifications_legacy_schedule_key_id
        UNIQUE USING INDEX owed_notifications_legacy_schedule_key_id;
    REVOKE ALL ON owed_notifications_legacy FROM owed_runtime, owed_apps, owed_definer;
    -- The parent's unnamed checks are named as the table's are (a check's
    -- name is chosen unique in the schema): the table's step aside until
    -- the parent has them, and take their names back to be attached.
    SELECT array_agg(k.conname ORDER BY k.conname) INTO v_checks FROM pg_constraint k
     WHERE k.conrelid = 'owed_notifications_legacy'::regclass AND k.contype = 'c' AND k.conname <> 'owed_notifications_legacy_bound';
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notifications_legacy RENAME CONSTRAINT %I TO %I', v_checks[i], 'owed_step_aside_' || i);
    END LOOP;
    CREATE TABLE owed_notifications (
        id                  bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME owed_notifications_id_seq) PRIMARY KEY,
        tenant_id           text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
        recipient           text        NOT NULL CHECK (recipient <> '' AND octet_length(recipient) <= 512),
        channel             text        NOT NULL CHECK (channel <> '' AND octet_length(channel) <= 64),
        kind                text        NOT NULL CHECK (kind <> '' AND octet_length(kind) <= 128),
        ref_id              text        NOT NULL CHECK (ref_id <> '' AND octet_length(ref_id) <= 256),
        due_at              timestamptz NOT NULL,
        expires_at          timestamptz CHECK (expires_at IS NULL OR expires_at > due_at),
        payload             jsonb       DEFAULT '{}'::jsonb CHECK (octet_length(payload::text) <= 65536),
        state               text        NOT NULL DEFAULT 'pending'
                            CHECK (state IN ('pending', 'leased', 'queued', 'sending',
                                             'delivered', 'skipped', 'expired', 'failed', 'cancelled')),
        attempts            integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
        lease_until         timestamptz,
        claimed_at          timestamptz,
        published_at        timestamptz,
        delivered_at        timestamptz,
        settled_at          timestamptz,
        provider            text,
        provider_message_id text,
        last_error          text,
        created_at          timestamptz NOT NULL DEFAULT now(),
        updated_at          timestamptz NOT NULL DEFAULT now(),
        queue_generation    integer     NOT NULL DEFAULT 0 CHECK (queue_generation >= 0),
        claim_seq           bigint      NOT NULL DEFAULT 0,
        intent              text,
        intent_due_at       timestamptz,
        intent_expires_at   timestamptz,
        intent_at           timestamptz,
        intent_outcome      text,
        payload_id          bigint,
        receipt_status      text        CHECK (receipt_status IN ('sent', 'deferred', 'delivered', 'bounced', 'failed')),
        receipt_code        text        CHECK (octet_length(receipt_code) <= 256),
        confirmed_at        timestamptz,
        materialised        boolean     NOT NULL DEFAULT false,
        claim_revocable     boolean     NOT NULL DEFAULT false,
        not_before          timestamptz,
        time_zone           text        CHECK (time_zone <> '' AND octet_length(time_zone) <= 64),
        due_local           timestamp,
        intent_payload      jsonb       CHECK (octet_length(intent_payload::text) <= 65536),
        intent_due_local    timestamp,
        held_from           timestamptz CHECK (owed_time_in_range(held_from)),
        urgent              boolean     NOT NULL DEFAULT false,
        digest_id           bigint,
        digest_from         timestamptz CHECK (owed_time_in_range(digest_from)),
        intent_held_from    timestamptz CHECK (owed_time_in_range(intent_held_from)),
        intent_time_zone    text        CHECK (intent_time_zone <> '' AND octet_length(intent_time_zone) <= 64),
        CONSTRAINT owed_notifications_schedule_key UNIQUE (tenant_id, recipient, kind, ref_id, due_at, id),
        CONSTRAINT owed_notifications_settled_state CHECK (
            (settled_at IS NOT NULL) = (state IN ('delivered', 'skipped', 'expired', 'failed', 'cancelled'))),
        CONSTRAINT owed_notifications_delivered_at CHECK (state <> 'delivered' OR delivered_at IS NOT NULL),
        CONSTRAINT owed_notifications_payload_present CHECK (payload IS NOT NULL OR payload_id IS NOT NULL),
        CONSTRAINT owed_notifications_intent_kind CHECK (intent IN ('cancel', 'reschedule', 'update')),
        CONSTRAINT owed_notifications_intent_outcome
            CHECK (intent_outcome IN ('applied', 'too_late', 'new_row', 'superseded', 'refused')),
        CONSTRAINT owed_notifications_due_at_in_range CHECK (owed_time_in_range(due_at)),
        CONSTRAINT owed_notifications_expires_at_in_range CHECK (owed_time_in_range(expires_at)),
        CONSTRAINT owed_notifications_intent_due_at_in_range CHECK (owed_time_in_range(intent_due_at)),
        CONSTRAINT owed_notifications_intent_expires_at_in_range CHECK (owed_time_in_range(intent_expires_at)),
        CONSTRAINT owed_notifications_not_before_in_range CHECK (owed_time_in_range(not_before)),
        CONSTRAINT owed_notifications_times_in_range CHECK (
            owed_time_in_range(lease_until) AND owed_time_in_range(claimed_at) AND owed_time_in_range(published_at)
            AND owed_time_in_range(delivered_at) AND owed_time_in_range(settled_at) AND owed_time_in_range(created_at)
            AND owed_time_in_range(updated_at) AND owed_time_in_range(intent_at)),
        CONSTRAINT owed_notifications_intent_expiry
            CHECK (intent_expires_at IS NULL OR intent_expires_at > coalesce(intent_held_from, intent_due_at)),
        CONSTRAINT owed_notifications_intent_recorded CHECK (
            (intent IS NULL) = (intent_at IS NULL)
            AND (intent IS NOT NULL OR intent_outcome IS NULL)
            AND (intent IS DISTINCT FROM 'reschedule' OR intent_due_at IS NOT NULL)),
        CONSTRAINT owed_notifications_intent_waits_on_send
            CHECK (intent IS NULL OR intent_outcome IS NOT NULL OR state = 'sending'),
        CONSTRAINT owed_notifications_due_local_zone CHECK (due_local IS NULL OR time_zone IS NOT NULL)
    ) PARTITION BY RANGE (id);
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notifications_legacy RENAME CONSTRAINT %I TO %I', 'owed_step_aside_' || i, v_checks[i]);
    END LOOP;
    CREATE INDEX owed_notifications_owed_due ON owed_notifications (due_at, id) WHERE settled_at IS NULL;
    CREATE INDEX owed_notifications_pending_owed ON owed_notifications
        (tenant_id, channel, greatest(due_at, created_at), due_at, id) WHERE state = 'pending';
    CREATE INDEX owed_notifications_in_flight ON owed_notifications (lease_until)
        WHERE state IN ('leased', 'queued', 'sending');
    CREATE INDEX owed_notifications_digest ON owed_notifications (tenant_id, digest_id)
        WHERE digest_id IS NOT NULL AND settled_at IS NULL;
    CREATE INDEX owed_notifications_owed_expiry ON owed_notifications (expires_at)
        WHERE settled_at IS NULL AND expires_at IS NOT NULL;
    CREATE INDEX owed_notifications_tenant_ref ON owed_notifications (tenant_id, ref_id);
    CREATE INDEX owed_notifications_tenant_due ON owed_notifications (tenant_id, due_at, id);
    CREATE INDEX owed_notifications_materialised_owed ON owed_notifications (expires_at)
        WHERE materialised AND settled_at IS NULL;
    CREATE INDEX owed_notifications_payload ON owed_notifications (tenant_id, payload_id) WHERE payload_id IS NOT NULL;
    CREATE INDEX owed_notifications_settled ON owed_notifications (settled_at) INCLUDE (state, due_at, delivered_at)
        WHERE settled_at IS NOT NULL;
    ALTER TABLE owed_notifications ENABLE ROW LEVEL SECURITY;
    ALTER TABLE owed_notifications FORCE ROW LEVEL SECURITY;
    CREATE POLICY owed_notifications_tenant ON owed_notifications TO owed_runtime
        USING (owed_tenant_in_scope(tenant_id))
        WITH CHECK (owed_tenant_in_scope(tenant_id));
    CREATE POLICY owed_notifications_apps ON owed_notifications TO owed_apps
        USING (tenant_id = (SELECT owed_apps_tenant()))
        WITH CHECK (tenant_id = (SELECT owed_apps_tenant()));
    CREATE POLICY owed_notifications_owner ON owed_notifications TO CURRENT_USER USING (true) WITH CHECK (true);
    CREATE POLICY owed_notifications_definer ON owed_notifications TO owed_definer USING (true) WITH CHECK (true);
    GRANT SELECT, INSERT, UPDATE ON owed_notifications TO owed_runtime, owed_definer;
    GRANT SELECT ON owed_notifications TO owed_apps;
    GRANT INSERT (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload, time_zone, due_local)
        ON owed_notifications TO owed_apps;
    GRANT UPDATE (due_at, expires_at, payload, state, settled_at, last_error, updated_at, time_zone, due_local)
        ON owed_notifications TO owed_apps;
    CREATE POLICY owed_notifications_apps_pending ON owed_notifications AS RESTRICTIVE FOR UPDATE TO owed_apps
        USING (state = 'pending')
        WITH CHECK (state IN ('pending', 'cancelled'));
    CREATE TRIGGER owed_notifications_due_inserted
        AFTER INSERT ON owed_notifications
        REFERENCING NEW TABLE AS owed_due_inserted
        FOR EACH STATEMENT EXECUTE FUNCTION owed_notify_due_inserted();
    CREATE TRIGGER owed_notifications_due_updated
        AFTER UPDATE OF state, due_at, not_before ON owed_notifications
        FOR EACH ROW
        WHEN ((NEW.state = 'pending' AND NEW.due_at <= now() + interval '1 minute'
               AND (OLD.due_at IS DISTINCT FROM NEW.due_at OR OLD.state NOT IN ('pending', 'leased')))
              OR (OLD.state = 'sending' AND owed_handed_back(NEW.state, NEW.lease_until, NEW.not_before)
                  AND NEW.not_before <= now() + interval '1 minute'))
        EXECUTE FUNCTION owed_notify_due_updated();
    CREATE TRIGGER owed_notifications_default_grace
        BEFORE INSERT ON owed_notifications
        FOR EACH ROW
        WHEN (NEW.expires_at IS NULL)
        EXECUTE FUNCTION owed_apply_default_grace();
    CREATE TRIGGER owed_notifications_apply_intent
        BEFORE UPDATE ON owed_notifications
        FOR EACH ROW
        WHEN (OLD.state = 'sending' AND NEW.state <> 'sending'
              AND OLD.intent IS NOT NULL AND OLD.intent_outcome IS NULL)
        EXECUTE FUNCTION owed_apply_intent();
    CREATE TRIGGER owed_notifications_key_insert
        BEFORE INSERT ON owed_notifications
        FOR EACH ROW
        EXECUTE FUNCTION owed_notification_key_keep();
    CREATE TRIGGER owed_notifications_key_update
        BEFORE UPDATE ON owed_notifications
        FOR EACH ROW
        WHEN ((NEW.tenant_id, NEW.recipient, NEW.kind, NEW.ref_id, NEW.due_at)
              IS DISTINCT FROM (OLD.tenant_id, OLD.recipient, OLD.kind, OLD.ref_id, OLD.due_at))
        EXECUTE FUNCTION owed_notification_key_keep();
    CREATE TRIGGER owed_notifications_key_delete
        AFTER DELETE ON owed_notifications
        FOR EACH ROW
        EXECUTE FUNCTION owed_notification_key_keep();
    CREATE TRIGGER owed_ledger_minutes_inserted
        AFTER INSERT ON owed_notifications
        REFERENCING NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_count();
    CREATE TRIGGER owed_ledger_minutes_updated
        AFTER UPDATE ON owed_notifications
        REFERENCING OLD TABLE AS owed_old NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_count();
    -- A check the table holds NOT VALID (a migration added it so, its old
    -- rows unchecked) cannot meet a valid one of the parent's: the parent's
    -- is added NOT VALID too, once the table is attached.
    SELECT array_agg(k.conname ORDER BY k.conname), array_agg(pg_get_constraintdef(k.oid) ORDER BY k.conname)
      INTO v_nv_names, v_nv_defs FROM pg_constraint k
     WHERE k.conrelid = 'owed_notifications_legacy'::regclass AND k.contype = 'c' AND NOT k.convalidated;
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notifications DROP CONSTRAINT %I', v_nv_names[i]);
    END LOOP;
    EXECUTE format('ALTER TABLE owed_notifications ATTACH PARTITION owed_notifications_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%s)', v_n);
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notifications ADD CONSTRAINT %I %s', v_nv_names[i], v_nv_defs[i]);
    END LOOP;

    -- owed_notification_attempts: the same, on the ledger's bound, its key the row's id with its own.
    ALTER TABLE owed_notification_attempts RENAME TO owed_notification_attempts_legacy;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_notification_attempts_legacy'::regclass AND c.relname NOT LIKE '%legacy%' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname, v_index.relname || '_legacy');
    END LOOP;
    SELECT last_value, is_called INTO v_last, v_called FROM notification_attempts_id_seq;
    DROP TRIGGER owed_ledger_minutes_attempted ON owed_notification_attempts_legacy;
    ALTER TABLE owed_notification_attempts_legacy ALTER COLUMN id DROP IDENTITY;
    ALTER TABLE owed_notification_attempts_legacy DROP CONSTRAINT owed_notification_attempts_pkey_legacy;
    ALTER TABLE owed_notification_attempts_legacy ADD CONSTRAINT owed_notification_attempts_pkey_legacy PRIMARY KEY USING INDEX owed_notification_attempts_legacy_pkey_next;
    REVOKE ALL ON owed_notification_attempts_legacy FROM owed_runtime, owed_definer;
    -- The parent's unnamed checks are named as the table's are (a check's
    -- name is chosen unique in the schema): the table's step aside until
    -- the parent has them, and take their names back to be attached.
    SELECT array_agg(k.conname ORDER BY k.conname) INTO v_checks FROM pg_constraint k
     WHERE k.conrelid = 'owed_notification_attempts_legacy'::regclass AND k.contype = 'c' AND k.conname <> 'owed_notification_attempts_legacy_bound';
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notification_attempts_legacy RENAME CONSTRAINT %I TO %I', v_checks[i], 'owed_step_aside_' || i);
    END LOOP;
    CREATE TABLE owed_notification_attempts (
        id                  bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME notification_attempts_id_seq),
        notification_id     bigint      NOT NULL,
        tenant_id           text        NOT NULL,
        attempt             integer     NOT NULL CHECK (attempt >= 1),
        provider            text        NOT NULL,
        started_at          timestamptz NOT NULL,
        finished_at         timestamptz NOT NULL,
        outcome             text        NOT NULL
                            CHECK (outcome IN ('accepted', 'skipped', 'transient', 'permanent')),
        provider_message_id text,
        http_status         integer,
        error               text,
        possible_duplicate  boolean     NOT NULL DEFAULT false,
        CONSTRAINT owed_notification_attempts_pkey PRIMARY KEY (notification_id, id)
    ) PARTITION BY RANGE (notification_id);
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notification_attempts_legacy RENAME CONSTRAINT %I TO %I', 'owed_step_aside_' || i, v_checks[i]);
    END LOOP;
    CREATE INDEX owed_notification_attempts_notification ON owed_notification_attempts (notification_id, attempt);
    CREATE INDEX owed_notification_attempts_message
        ON owed_notification_attempts (provider_message_id) WHERE provider_message_id IS NOT NULL;
    CREATE INDEX owed_notification_attempts_finished ON owed_notification_attempts (finished_at);
    ALTER TABLE owed_notification_attempts ENABLE ROW LEVEL SECURITY;
    ALTER TABLE owed_notification_attempts FORCE ROW LEVEL SECURITY;
    CREATE POLICY owed_notification_attempts_tenant ON owed_notification_attempts TO owed_runtime
        USING (tenant_id = current_setting('owed.tenant_id', true))
        WITH CHECK (owed_tenant_in_scope(tenant_id));
    CREATE POLICY owed_notification_attempts_owner ON owed_notification_attempts TO CURRENT_USER
        USING (true) WITH CHECK (true);
    CREATE POLICY owed_notification_attempts_definer ON owed_notification_attempts TO owed_definer USING (true);
    GRANT SELECT, INSERT, UPDATE ON owed_notification_attempts TO owed_runtime;
    GRANT SELECT ON owed_notification_attempts TO owed_definer;
    CREATE TRIGGER owed_ledger_minutes_attempted
        AFTER INSERT ON owed_notification_attempts
        REFERENCING NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_attempts();
    PERFORM setval('notification_attempts_id_seq', v_last, v_called);
    -- A check the table holds NOT VALID (a migration added it so, its old
    -- rows unchecked) cannot meet a valid one of the parent's: the parent's
    -- is added NOT VALID too, once the table is attached.
    SELECT array_agg(k.conname ORDER BY k.conname), array_agg(pg_get_constraintdef(k.oid) ORDER BY k.conname)
      INTO v_nv_names, v_nv_defs FROM pg_constraint k
     WHERE k.conrelid = 'owed_notification_attempts_legacy'::regclass AND k.contype = 'c' AND NOT k.convalidated;
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notification_attempts DROP CONSTRAINT %I', v_nv_names[i]);
    END LOOP;
    EXECUTE format('ALTER TABLE owed_notification_attempts ATTACH PARTITION owed_notification_attempts_legacy FOR VALUES FROM (MINVALUE) TO (%s)', v_n);
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_notification_attempts ADD CONSTRAINT %I %s', v_nv_names[i], v_nv_defs[i]);
    END LOOP;

    -- owed_receipts: the same, on the ledger's bound, its key the row's id with its own.
    ALTER TABLE owed_receipts RENAME TO owed_receipts_legacy;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_receipts_legacy'::regclass AND c.relname NOT LIKE '%legacy%' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname, v_index.relname || '_legacy');
    END LOOP;
    SELECT last_value, is_called INTO v_last, v_called FROM owed_receipts_id_seq;
    ALTER TABLE owed_receipts_legacy ALTER COLUMN id DROP IDENTITY;
    ALTER TABLE owed_receipts_legacy DROP CONSTRAINT owed_receipts_pkey_legacy;
    ALTER TABLE owed_receipts_legacy ADD CONSTRAINT owed_receipts_pkey_legacy PRIMARY KEY USING INDEX owed_receipts_legacy_pkey_next;
    REVOKE ALL ON owed_receipts_legacy FROM owed_runtime, owed_definer;
    -- The parent's unnamed checks are named as the table's are (a check's
    -- name is chosen unique in the schema): the table's step aside until
    -- the parent has them, and take their names back to be attached.
    SELECT array_agg(k.conname ORDER BY k.conname) INTO v_checks FROM pg_constraint k
     WHERE k.conrelid = 'owed_receipts_legacy'::regclass AND k.contype = 'c' AND k.conname <> 'owed_receipts_legacy_bound';
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_receipts_legacy RENAME CONSTRAINT %I TO %I', v_checks[i], 'owed_step_aside_' || i);
    END LOOP;
    CREATE TABLE owed_receipts (
        id                  bigint      GENERATED ALWAYS AS IDENTITY,
        tenant_id           text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
        notification_id     bigint      NOT NULL,
        provider            text        NOT NULL CHECK (provider <> '' AND octet_length(provider) <= 64),
        provider_message_id text        NOT NULL
                            CHECK (provider_message_id <> '' AND octet_length(provider_message_id) <= 256),
        status              text        NOT NULL CHECK (status IN ('sent', 'deferred', 'delivered', 'bounced', 'failed')),
        code                text        CHECK (octet_length(code) <= 256),
        occurred_at         timestamptz,
        received_at         timestamptz NOT NULL,
        CONSTRAINT owed_receipts_pkey PRIMARY KEY (notification_id, id)
    ) PARTITION BY RANGE (notification_id);
    FOR i IN 1 .. coalesce(cardinality(v_checks), 0) LOOP
        EXECUTE format('ALTER TABLE owed_receipts_legacy RENAME CONSTRAINT %I TO %I', 'owed_step_aside_' || i, v_checks[i]);
    END LOOP;
    CREATE UNIQUE INDEX owed_receipts_replay ON owed_receipts
        (provider, provider_message_id, status, (coalesce(occurred_at, '-infinity'::timestamptz)), notification_id);
    CREATE INDEX owed_receipts_notification ON owed_receipts (notification_id, received_at);
    ALTER TABLE owed_receipts ENABLE ROW LEVEL SECURITY;
    ALTER TABLE owed_receipts FORCE ROW LEVEL SECURITY;
    CREATE POLICY owed_receipts_tenant ON owed_receipts TO owed_runtime
        USING (tenant_id = current_setting('owed.tenant_id', true))
        WITH CHECK (tenant_id = current_setting('owed.tenant_id', true));
    CREATE POLICY owed_receipts_definer ON owed_receipts TO owed_definer USING (true) WITH CHECK (true);
    CREATE POLICY owed_receipts_owner ON owed_receipts TO CURRENT_USER USING (true) WITH CHECK (true);
    GRANT SELECT ON owed_receipts TO owed_runtime;
    GRANT SELECT, INSERT ON owed_receipts TO owed_definer;
    PERFORM setval('owed_receipts_id_seq', v_last, v_called);
    -- A check the table holds NOT VALID (a migration added it so, its old
    -- rows unchecked) cannot meet a valid one of the parent's: the parent's
    -- is added NOT VALID too, once the table is attached.
    SELECT array_agg(k.conname ORDER BY k.conname), array_agg(pg_get_constraintdef(k.oid) ORDER BY k.conname)
      INTO v_nv_names, v_nv_defs FROM pg_constraint k
     WHERE k.conrelid = 'owed_receipts_legacy'::regclass AND k.contype = 'c' AND NOT k.convalidated;
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_receipts DROP CONSTRAINT %I', v_nv_names[i]);
    END LOOP;
    EXECUTE format('ALTER TABLE owed_receipts ATTACH PARTITION owed_receipts_legacy FOR VALUES FROM (MINVALUE) TO (%s)', v_n);
    FOR i IN 1 .. coalesce(cardinality(v_nv_names), 0) LOOP
        EXECUTE format('ALTER TABLE owed_receipts ADD CONSTRAINT %I %s', v_nv_names[i], v_nv_defs[i]);
    END LOOP;

    -- A receipt's replay is found by the new key (receipts.sql).
CREATE OR REPLACE FUNCTION owed_receipt_record(p_provider text, p_message_id text, p_status text, p_code text,
                                    p_occurred_at timestamptz, p_now timestamptz)
RETURNS TABLE (known boolean, recorded boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_target record;
    v_at timestamptz;
BEGIN
    -- The latest accepted send with this id through this provider family.
    SELECT a.notification_id, a.tenant_id INTO v_target
      FROM owed_notification_attempts a
     WHERE a.provider_message_id = p_message_id
       AND a.outcome = 'accepted'
       AND split_part(a.provider, ':', 1) = p_provider
     ORDER BY a.id DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, false;
        RETURN;
    END IF;
    INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, code,
                               occurred_at, received_at)
    VALUES (v_target.tenant_id, v_target.notification_id, p_provider, p_message_id, p_status, p_code,
            p_occurred_at, coalesce(p_now, now()))
    ON CONFLICT (provider, provider_message_id, status, (coalesce(occurred_at, '-infinity'::timestamptz)),
                 notification_id)
    DO NOTHING;
    -- FOUND is false when the key was there already: a replay changes
    -- nothing.
    IF NOT FOUND THEN
        RETURN QUERY SELECT true, false;
        RETURN;
    END IF;
    v_at := coalesce(p_occurred_at, p_now, now());
    UPDATE owed_notifications n
       SET receipt_status = p_status, receipt_code = p_code, confirmed_at = v_at
     WHERE n.id = v_target.notification_id
       AND (owed_receipt_rank(p_status) > owed_receipt_rank(n.receipt_status)
            OR (owed_receipt_rank(p_status) = owed_receipt_rank(n.receipt_status) AND v_at >= n.confirmed_at));
    RETURN QUERY SELECT true, true;
END
$$;

    -- The parent's sequence starts past the ids the table holds (a
    -- rolled-back upgrade left some of this month's range), and
    -- owed_ledger_partitions_ensure moves it on to this month's range.
    PERFORM setval('owed_notifications_id_seq', coalesce((SELECT max(id) FROM owed_notifications_legacy), 0) + 1, false);
    PERFORM owed_ledger_partitions_ensure(now(), 1);
    ALTER TABLE owed_undeliverable ADD CONSTRAINT owed_undeliverable_notification_id_fkey
        FOREIGN KEY (notification_id) REFERENCES owed_notifications (id) ON DELETE SET NULL NOT VALID;
    REVOKE owed_definer FROM CURRENT_USER;
END
$swap$;
-- +goose StatementEnd

-- Step 4: the marks' foreign key checked, under SHARE UPDATE EXCLUSIVE.
ALTER TABLE owed_undeliverable VALIDATE CONSTRAINT owed_undeliverable_notification_id_fkey;

-- +goose Down
-- The way back, in one transaction under one exclusive lock: each legacy
-- table detached, every row of the month partitions copied into it (their
-- ids stay theirs), the parents dropped, and the tables as they were:
-- names, indexes, keys, identities (from the ids they hold), grants,
-- triggers and foreign keys. The copy is the month partitions' size, and
-- the attempts' and receipts' keys on id are built again: a rollback soon
-- after the upgrade costs little.
-- +goose StatementBegin
DO $down$
DECLARE
    v_index record;
    v_max bigint;
    v_timeout text;
BEGIN
    GRANT owed_definer TO CURRENT_USER;
    -- The lock is taken whole or not at all: a wait is cut short at half a
    -- second (the statements queued behind it wait no longer) and a
    -- deadlock with a serving transaction that holds one of the tables is
    -- given up; either is tried again, 200 times at most.
    v_timeout := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout', '500ms', true);
    FOR v_try IN 1 .. 200 LOOP
        BEGIN
            LOCK TABLE owed_notifications, owed_notification_attempts, owed_receipts, owed_undeliverable
                IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            IF v_try = 200 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
    ALTER TABLE owed_undeliverable DROP CONSTRAINT owed_undeliverable_notification_id_fkey;
CREATE OR REPLACE FUNCTION owed_receipt_record(p_provider text, p_message_id text, p_status text, p_code text,
                                    p_occurred_at timestamptz, p_now timestamptz)
RETURNS TABLE (known boolean, recorded boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_target record;
    v_at timestamptz;
BEGIN
    -- The latest accepted send with this id through this provider family.
    SELECT a.notification_id, a.tenant_id INTO v_target
      FROM owed_notification_attempts a
     WHERE a.provider_message_id = p_message_id
       AND a.outcome = 'accepted'
       AND split_part(a.provider, ':', 1) = p_provider
     ORDER BY a.id DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, false;
        RETURN;
    END IF;
    INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, code,
                               occurred_at, received_at)
    VALUES (v_target.tenant_id, v_target.notification_id, p_provider, p_message_id, p_status, p_code,
            p_occurred_at, coalesce(p_now, now()))
    ON CONFLICT (provider, provider_message_id, status, (coalesce(occurred_at, '-infinity'::timestamptz)),
                 notification_id)
    DO NOTHING;
    -- FOUND is false when the key was there already: a replay changes
    -- nothing.
    IF NOT FOUND THEN
        RETURN QUERY SELECT true, false;
        RETURN;
    END IF;
    v_at := coalesce(p_occurred_at, p_now, now());
    UPDATE owed_notifications n
       SET receipt_status = p_status, receipt_code = p_code, confirmed_at = v_at
     WHERE n.id = v_target.notification_id
       AND (owed_receipt_rank(p_status) > owed_receipt_rank(n.receipt_status)
            OR (owed_receipt_rank(p_status) = owed_receipt_rank(n.receipt_status) AND v_at >= n.confirmed_at));
    RETURN QUERY SELECT true, true;
END
$$;

    ALTER TABLE owed_receipts DETACH PARTITION owed_receipts_legacy;
    ALTER TABLE owed_receipts_legacy DROP CONSTRAINT owed_receipts_legacy_bound;
    DROP INDEX owed_receipts_legacy_replay_next;
    INSERT INTO owed_receipts_legacy SELECT * FROM owed_receipts;
    DROP TABLE owed_receipts;
    ALTER TABLE owed_receipts_legacy RENAME TO owed_receipts;
    ALTER TABLE owed_receipts DROP CONSTRAINT owed_receipts_pkey_legacy;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_receipts'::regclass AND c.relname LIKE '%\_legacy' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname,
                       left(v_index.relname, -length('_legacy')));
    END LOOP;
    ALTER TABLE owed_receipts ADD CONSTRAINT owed_receipts_pkey PRIMARY KEY (id);
    ALTER TABLE owed_receipts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
    SELECT max(id) INTO v_max FROM owed_receipts;
    IF v_max IS NOT NULL THEN
        PERFORM setval('owed_receipts_id_seq', v_max);
    END IF;
    GRANT SELECT ON owed_receipts TO owed_runtime;
    GRANT SELECT, INSERT ON owed_receipts TO owed_definer;

    ALTER TABLE owed_notification_attempts DETACH PARTITION owed_notification_attempts_legacy;
    ALTER TABLE owed_notification_attempts_legacy DROP CONSTRAINT owed_notification_attempts_legacy_bound;

    INSERT INTO owed_notification_attempts_legacy SELECT * FROM owed_notification_attempts;
    DROP TABLE owed_notification_attempts;
    ALTER TABLE owed_notification_attempts_legacy RENAME TO owed_notification_attempts;
    ALTER TABLE owed_notification_attempts DROP CONSTRAINT owed_notification_attempts_pkey_legacy;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_notification_attempts'::regclass AND c.relname LIKE '%\_legacy' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname,
                       left(v_index.relname, -length('_legacy')));
    END LOOP;
    ALTER TABLE owed_notification_attempts ADD CONSTRAINT owed_notification_attempts_pkey PRIMARY KEY (id);
    ALTER TABLE owed_notification_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME notification_attempts_id_seq);
    SELECT max(id) INTO v_max FROM owed_notification_attempts;
    IF v_max IS NOT NULL THEN
        PERFORM setval('notification_attempts_id_seq', v_max);
    END IF;
    GRANT SELECT, INSERT, UPDATE ON owed_notification_attempts TO owed_runtime;
    GRANT SELECT ON owed_notification_attempts TO owed_definer;
    CREATE TRIGGER owed_ledger_minutes_attempted
        AFTER INSERT ON owed_notification_attempts
        REFERENCING NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_attempts();

    ALTER TABLE owed_notifications DETACH PARTITION owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_due_inserted ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_due_updated ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_default_grace ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_apply_intent ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_key_insert ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_key_update ON owed_notifications_legacy;
    DROP TRIGGER IF EXISTS owed_notifications_key_delete ON owed_notifications_legacy;
    ALTER TABLE owed_notifications_legacy DROP CONSTRAINT owed_notifications_legacy_bound;
    ALTER TABLE owed_notifications_legacy DROP CONSTRAINT owed_notifications_legacy_schedule_key_id;
    INSERT INTO owed_notifications_legacy SELECT * FROM owed_notifications;
    DROP TABLE owed_notifications;
    ALTER TABLE owed_notifications_legacy RENAME TO owed_notifications;
    FOR v_index IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
                    WHERE x.indrelid = 'owed_notifications'::regclass AND c.relname LIKE '%\_legacy' LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', v_index.relname,
                       left(v_index.relname, -length('_legacy')));
    END LOOP;
    ALTER TABLE owed_notifications ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME notifications_id_seq);
    SELECT max(id) INTO v_max FROM owed_notifications;
    IF v_max IS NOT NULL THEN
        PERFORM setval('notifications_id_seq', v_max);
    END IF;
    GRANT SELECT, INSERT, UPDATE ON owed_notifications TO owed_runtime, owed_definer;
    GRANT SELECT ON owed_notifications TO owed_apps;
    GRANT INSERT (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload, time_zone, due_local)
        ON owed_notifications TO owed_apps;
    GRANT UPDATE (due_at, expires_at, payload, state, settled_at, last_error, updated_at, time_zone, due_local)
        ON owed_notifications TO owed_apps;
    CREATE TRIGGER owed_notifications_due_inserted
        AFTER INSERT ON owed_notifications
        REFERENCING NEW TABLE AS owed_due_inserted
        FOR EACH STATEMENT EXECUTE FUNCTION owed_notify_due_inserted();
    CREATE TRIGGER owed_notifications_due_updated
        AFTER UPDATE OF state, due_at, not_before ON owed_notifications
        FOR EACH ROW
        WHEN ((NEW.state = 'pending' AND NEW.due_at <= now() + interval '1 minute'
               AND (OLD.due_at IS DISTINCT FROM NEW.due_at OR OLD.state NOT IN ('pending', 'leased')))
              OR (OLD.state = 'sending' AND owed_handed_back(NEW.state, NEW.lease_until, NEW.not_before)
                  AND NEW.not_before <= now() + interval '1 minute'))
        EXECUTE FUNCTION owed_notify_due_updated();
    CREATE TRIGGER owed_notifications_default_grace
        BEFORE INSERT ON owed_notifications
        FOR EACH ROW
        WHEN (NEW.expires_at IS NULL)
        EXECUTE FUNCTION owed_apply_default_grace();
    CREATE TRIGGER owed_notifications_apply_intent
        BEFORE UPDATE ON owed_notifications
        FOR EACH ROW
        WHEN (OLD.state = 'sending' AND NEW.state <> 'sending'
              AND OLD.intent IS NOT NULL AND OLD.intent_outcome IS NULL)
        EXECUTE FUNCTION owed_apply_intent();
    CREATE TRIGGER owed_ledger_minutes_inserted
        AFTER INSERT ON owed_notifications
        REFERENCING NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_count();
    CREATE TRIGGER owed_ledger_minutes_updated
        AFTER UPDATE ON owed_notifications
        REFERENCING OLD TABLE AS owed_old NEW TABLE AS owed_new
        FOR EACH STATEMENT
        EXECUTE FUNCTION owed_ledger_minutes_count();
    ALTER TABLE owed_notification_attempts ADD CONSTRAINT owed_notification_attempts_notification_id_fkey
        FOREIGN KEY (notification_id) REFERENCES owed_notifications (id) ON DELETE CASCADE NOT VALID;
    ALTER TABLE owed_receipts ADD CONSTRAINT owed_receipts_notification_id_fkey
        FOREIGN KEY (notification_id) REFERENCES owed_notifications (id) ON DELETE CASCADE NOT VALID;
    ALTER TABLE owed_undeliverable ADD CONSTRAINT owed_undeliverable_notification_id_fkey
        FOREIGN KEY (notification_id) REFERENCES owed_notifications (id) ON DELETE SET NULL NOT VALID;
    DROP TABLE owed_notification_keys;
    DROP FUNCTION owed_notification_key_keep();
    DROP FUNCTION owed_ledger_partitions_ensure(timestamptz, integer);
    DROP FUNCTION owed_ledger_partition_name_indexes(text, text);
    DROP FUNCTION owed_ledger_partitions();
    DROP FUNCTION owed_ledger_month_first_id(date);
    REVOKE owed_definer FROM CURRENT_USER;
END
$down$;
-- +goose StatementEnd
ALTER TABLE owed_notification_attempts VALIDATE CONSTRAINT owed_notification_attempts_notification_id_fkey;
ALTER TABLE owed_receipts VALIDATE CONSTRAINT owed_receipts_notification_id_fkey;
ALTER TABLE owed_undeliverable VALIDATE CONSTRAINT owed_undeliverable_notification_id_fkey;
