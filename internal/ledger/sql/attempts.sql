-- One row per send tried: what the provider answered, and whether the send
-- may have been a duplicate. A row's attempts are its delivery history;
-- owed_receipt_record finds a receipt's send here by its message id.
--
-- Partitioned as the ledger is, by its row's id on the same month ranges
-- (owed_ledger_partitions_ensure, notifications.sql), so a month's
-- partition holds that month's rows' whole history and retention drops
-- the two together. So the key holds the partition key, and there is no
-- foreign key to owed_notifications: PostgreSQL 15 allows one, but
-- dropping a month of a table that references the ledger removes the
-- key's triggers on the ledger, which takes an exclusive lock on the whole
-- ledger, so every month retention drops would stop delivery for a moment
-- and queue behind any long read of the ledger (docs/scale.md measures
-- it). Only the settle functions (settle.sql) write attempts, each for a
-- row they hold.
CREATE TABLE owed_notification_attempts (
    -- The sequence keeps its name from before the owed_ prefix.
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
    -- The row was claimed again after a worker died mid-send, or the send
    -- was made under a superseded claim: the provider may have accepted
    -- another send of it, so this one may be a duplicate.
    possible_duplicate  boolean     NOT NULL DEFAULT false,
    CONSTRAINT owed_notification_attempts_pkey PRIMARY KEY (notification_id, id)
) PARTITION BY RANGE (notification_id);
CREATE INDEX owed_notification_attempts_notification ON owed_notification_attempts (notification_id, attempt);

-- The look-up every receipt makes (owed_receipt_record): the accepted send
-- whose provider message id a callback names. Only sends that returned an
-- id are indexed.
CREATE INDEX owed_notification_attempts_message
    ON owed_notification_attempts (provider_message_id) WHERE provider_message_id IS NOT NULL;

-- The dashboard's sends per minute (owed_ledger_sends_per_minute) and
-- owedctl stats' duplicate counts read the attempts finished since a time;
-- this keeps that read to the window instead of the whole table.
CREATE INDEX owed_notification_attempts_finished ON owed_notification_attempts (finished_at);

-- Each partition's autovacuum settings are owed_ledger_partitions_ensure's
-- (notifications.sql says why): a partitioned table has none of its own.

ALTER TABLE owed_notification_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE owed_notification_attempts FORCE ROW LEVEL SECURITY;
-- The worker's settle batch records the attempts of every tenant it names
-- (owed_tenant_scope); reads stay one tenant's.
CREATE POLICY owed_notification_attempts_tenant ON owed_notification_attempts TO owed_runtime
    USING (tenant_id = current_setting('owed.tenant_id', true))
    WITH CHECK (tenant_id = ANY ((SELECT owed_tenant_scope())::text[]));
CREATE POLICY owed_notification_attempts_owner ON owed_notification_attempts TO CURRENT_USER
    USING (true) WITH CHECK (true);
-- The definer's aggregates (owed_ledger_stats, owed_ledger_sends_per_minute)
-- and owed_receipt_record read attempts across tenants; none writes them.
CREATE POLICY owed_notification_attempts_definer ON owed_notification_attempts TO owed_definer USING (true);

-- Applications never see attempts: an application writes notifications,
-- and what was sent is the ledger's record.
GRANT SELECT, INSERT, UPDATE ON owed_notification_attempts TO owed_runtime;
GRANT SELECT ON owed_notification_attempts TO owed_definer;
