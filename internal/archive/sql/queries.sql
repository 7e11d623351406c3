-- Every statement internal/archive runs, by name (docs/sql.md). They run as
-- the owner of the schema: an archive reads and restores every tenant's
-- rows of an id range, which no runtime login may.

-- name: Unsettled
-- Unsettled counts the rows of the id range [$1, $2) still owed: an
-- archive refuses a range with one, since an owed row is never dropped.
-- The partial index of owed rows (owed_notifications_owed_due) holds
-- exactly them.
SELECT count(*) FROM owed_notifications WHERE settled_at IS NULL AND id >= $1 AND id < $2

-- name: Notifications
-- Notifications reads the rows of the id range [$1, $2) as JSON lines, by
-- the primary key, oldest first.
SELECT row_to_json(n)::text FROM owed_notifications n WHERE id >= $1 AND id < $2 ORDER BY id

-- name: Attempts
-- Attempts reads the sends of the rows of [$1, $2) as JSON lines, by
-- owed_notification_attempts_notification.
SELECT row_to_json(a)::text FROM owed_notification_attempts a
 WHERE notification_id >= $1 AND notification_id < $2 ORDER BY notification_id, attempt

-- name: Receipts
-- Receipts reads the receipts of the rows of [$1, $2) as JSON lines, by
-- owed_receipts_notification.
SELECT row_to_json(r)::text FROM owed_receipts r
 WHERE notification_id >= $1 AND notification_id < $2 ORDER BY notification_id, received_at, id

-- name: EventPayloads
-- EventPayloads reads the shared payloads the rows of [$1, $2) point at.
SELECT row_to_json(p)::text FROM owed_event_payloads p
 WHERE (p.tenant_id, p.id) IN (SELECT tenant_id, payload_id FROM owed_notifications
                                WHERE id >= $1 AND id < $2 AND payload_id IS NOT NULL)
 ORDER BY p.tenant_id, p.id

-- name: RestoreNotifications
-- RestoreNotifications inserts a batch of archived rows ($1, a JSON array
-- of the lines Notifications wrote) with their own ids; a row already there
-- (by id or schedule key) is left as it is, so a restore can run again.
-- The default grace's trigger gives a row without an expiry one as it is
-- inserted; RestoreExpiries takes it back.
INSERT INTO owed_notifications OVERRIDING SYSTEM VALUE
SELECT * FROM json_populate_recordset(NULL::owed_notifications, $1::json)
ON CONFLICT DO NOTHING
RETURNING id

-- name: RestoreExpiries
-- RestoreExpiries gives the restored rows ($1, the same JSON array) the
-- expiry they were archived with: none, where the default grace's trigger
-- gave them one on insert.
UPDATE owed_notifications n SET expires_at = NULL
  FROM json_populate_recordset(NULL::owed_notifications, $1::json) a
 WHERE n.id = a.id AND a.expires_at IS NULL AND n.expires_at IS NOT NULL AND n.id = ANY($2)

-- name: RestoreAttempts
-- RestoreAttempts inserts a batch of archived attempts with their own ids,
-- answering the row's id and the attempt's of each it inserted.
INSERT INTO owed_notification_attempts OVERRIDING SYSTEM VALUE
SELECT * FROM json_populate_recordset(NULL::owed_notification_attempts, $1::json)
ON CONFLICT DO NOTHING
RETURNING notification_id, id

-- name: UncountRestored
-- UncountRestored takes off the per-minute counters what the restore's
-- inserts of rows $1 and attempts ($2 their rows, $3 their ids) added
-- (owed_ledger_minutes_uncount, internal/ledger/sql/minutes.sql).
SELECT owed_ledger_minutes_uncount($1, $2, $3)

-- name: RestoreReceipts
-- RestoreReceipts inserts a batch of archived receipts with their own ids.
INSERT INTO owed_receipts OVERRIDING SYSTEM VALUE
SELECT * FROM json_populate_recordset(NULL::owed_receipts, $1::json)
ON CONFLICT DO NOTHING

-- name: RestoreEventPayloads
-- RestoreEventPayloads inserts a batch of archived shared payloads with
-- their own ids.
INSERT INTO owed_event_payloads OVERRIDING SYSTEM VALUE
SELECT * FROM json_populate_recordset(NULL::owed_event_payloads, $1::json)
ON CONFLICT DO NOTHING

-- name: ReapplyErasures
-- ReapplyErasures makes tombstones again of the restored rows of [$1, $2)
-- an erasure named (owed_erasures.notification_ids), as ledger.Erase made
-- them: an archive written before a recipient was erased still holds her,
-- and restoring it must not bring her back. Their shared payloads are not
-- restored (RestoreEventPayloads skips them: see the Go side), and their
-- attempts' errors are erased below.
WITH erased AS (
    SELECT DISTINCT unnest(e.notification_ids) AS id FROM owed_erasures e
), rows AS (
    UPDATE owed_notifications n
       SET recipient = 'erased:' || n.id, payload = '{}'::jsonb, payload_id = NULL,
           last_error = CASE WHEN n.last_error IS NOT NULL THEN 'erased' END
      FROM erased
     WHERE n.id = erased.id AND n.id >= $1 AND n.id < $2 AND n.recipient <> 'erased:' || n.id
    RETURNING n.id
), attempts AS (
    UPDATE owed_notification_attempts a SET error = 'erased'
      FROM erased
     WHERE a.notification_id = erased.id AND a.notification_id >= $1 AND a.notification_id < $2
       AND a.error IS NOT NULL AND a.error <> 'erased'
    RETURNING 1
)
SELECT (SELECT count(*) FROM rows), (SELECT count(*) FROM attempts)

-- name: DropOrphanPayloads
-- DropOrphanPayloads removes the restored shared payloads ($1 tenants, $2
-- ids, pairwise) no row points at once erasures are applied again: a
-- payload only an erased recipient's rows shared was hers.
DELETE FROM owed_event_payloads p
 USING unnest($1::text[], $2::bigint[]) AS r(tenant_id, id)
 WHERE p.tenant_id = r.tenant_id AND p.id = r.id
   AND NOT EXISTS (SELECT 1 FROM owed_notifications n WHERE n.tenant_id = p.tenant_id AND n.payload_id = p.id)

-- name: RecordRestore
-- RecordRestore appends the restore's line to the operators' audit trail
-- (owed_operator_audit, internal/ledger/sql/operator.sql), in the restore's
-- transaction: $1 the operator, $2 the id range and the archive, $3 the
-- ledger rows restored, $4 the reason. The restore runs as the schema's
-- owner, who owns the trail; the login is the database's own record of
-- who wrote the line, as owed_operator_audit_record writes it.
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES (now(), $1, 'archive_restore', $2, $3, $4, session_user)

-- name: EnsurePartitions
-- EnsurePartitions creates the partitions of the ledger, its attempts and
-- its receipts of $1's month and of the $2 months after it that are
-- missing, and moves the ids to $1's
-- month's range (owed_ledger_partitions_ensure,
-- internal/ledger/sql/notifications.sql). The owner alone may.
SELECT partition_name, first_id, end_id, created FROM owed_ledger_partitions_ensure($1, $2)

-- name: Partitions
-- Partitions lists the partitions of the ledger, its attempts and its
-- receipts, oldest range first, from the catalog (owed_ledger_partitions):
-- from_id is NULL for the legacy partitions' open start.
SELECT parent, partition, from_id, to_id, est_rows, bytes FROM owed_ledger_partitions()

-- Retention (retention.go), as the schema's owner.

-- name: SequencePosition
-- SequencePosition is where the ledger's id sequence stands: the last id
-- handed out, or the next one when owed_ledger_partitions_ensure has just
-- moved it. The partition holding it takes the new rows, and retention
-- never drops it or one after it.
SELECT last_value FROM owed_notifications_id_seq

-- name: RangeTenants
-- RangeTenants reads each tenant's rows of the id range [$1, $2): how
-- many, and when the last of them settled. A read of the month's
-- partition, once per month retention looks at.
SELECT tenant_id, count(*), max(settled_at) FROM owed_notifications
 WHERE id >= $1 AND id < $2 GROUP BY tenant_id ORDER BY tenant_id

-- name: HoldsOf
-- HoldsOf reads the compliance holds on the tenants $1.
SELECT tenant_id, reason, held_by, login, since FROM owed_retention_holds WHERE tenant_id = ANY($1) ORDER BY tenant_id

-- name: Holds
-- Holds lists every compliance hold, oldest first.
SELECT tenant_id, reason, held_by, login, since FROM owed_retention_holds ORDER BY since, tenant_id

-- name: AddHold
-- AddHold places a hold on tenant $1 ($2 reason, $3 who, $4 now); a hold
-- already there is left as it is (no row answered).
INSERT INTO owed_retention_holds (tenant_id, reason, held_by, since) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING tenant_id

-- name: RemoveHold
-- RemoveHold lifts tenant $1's hold, answering it when there was one.
DELETE FROM owed_retention_holds WHERE tenant_id = $1 RETURNING tenant_id

-- name: AuditLine
-- AuditLine writes a line of the operators' trail (owed_operator_audit,
-- internal/ledger/sql/operator.sql) as the owner: $1 at, $2 operator,
-- $3 action, $4 target, $5 count, $6 reason, and the login that ran it.
INSERT INTO owed_operator_audit (at, operator, action, target, count, reason, login)
VALUES ($1, $2, $3, $4, $5, $6, session_user)

-- name: StageMonth
-- StageMonth names the three partitions of ledger partition $1 *_retiring,
-- lifts their forced row-level security for the owner's reads and unlinks
-- the undeliverable marks from its rows (owed_ledger_retention_stage,
-- internal/ledger/sql/retention.sql).
SELECT from_id, to_id, names FROM owed_ledger_retention_stage($1)

-- name: DetachReceipts
-- DetachReceipts detaches the staged receipts' partition without blocking
-- the parent's reads and writes: it waits for the transactions using it.
ALTER TABLE owed_receipts DETACH PARTITION owed_receipts_retiring CONCURRENTLY

-- name: DetachAttempts
-- DetachAttempts detaches the staged attempts' partition, as
-- DetachReceipts does.
ALTER TABLE owed_notification_attempts DETACH PARTITION owed_notification_attempts_retiring CONCURRENTLY

-- name: DetachNotifications
-- DetachNotifications detaches the staged ledger partition, as
-- DetachReceipts does.
ALTER TABLE owed_notifications DETACH PARTITION owed_notifications_retiring CONCURRENTLY

-- name: FinishMonth
-- FinishMonth drops the detached month after its archive, unless a hold
-- on one of its tenants ($4) came since (owed_ledger_retention_finish).
SELECT owed_ledger_retention_finish($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- name: UndoMonth
-- UndoMonth attaches the staged month back under its names, when it stays
-- (owed_ledger_retention_undo).
SELECT owed_ledger_retention_undo($1, $2, $3)

-- Retention's archive of a detached month: the reads of Unsettled,
-- Notifications, Attempts, Receipts and EventPayloads, of the three
-- *_retiring tables, which no service reaches once they are detached, so
-- what the archive holds is what is dropped.

-- name: UnsettledRetiring
-- UnsettledRetiring counts the detached month's rows still owed, by the
-- partial index of owed rows.
SELECT count(*) FROM owed_notifications_retiring WHERE settled_at IS NULL AND id >= $1 AND id < $2

-- name: NotificationsRetiring
-- NotificationsRetiring reads the detached month's rows as JSON lines.
SELECT row_to_json(n)::text FROM owed_notifications_retiring n WHERE id >= $1 AND id < $2 ORDER BY id

-- name: AttemptsRetiring
-- AttemptsRetiring reads the detached month's attempts as JSON lines.
SELECT row_to_json(a)::text FROM owed_notification_attempts_retiring a
 WHERE notification_id >= $1 AND notification_id < $2 ORDER BY notification_id, attempt

-- name: ReceiptsRetiring
-- ReceiptsRetiring reads the detached month's receipts as JSON lines.
SELECT row_to_json(r)::text FROM owed_receipts_retiring r
 WHERE notification_id >= $1 AND notification_id < $2 ORDER BY notification_id, received_at, id

-- name: EventPayloadsRetiring
-- EventPayloadsRetiring reads the shared payloads the detached month's
-- rows point at.
SELECT row_to_json(p)::text FROM owed_event_payloads p
 WHERE (p.tenant_id, p.id) IN (SELECT tenant_id, payload_id FROM owed_notifications_retiring
                                WHERE id >= $1 AND id < $2 AND payload_id IS NOT NULL)
 ORDER BY p.tenant_id, p.id

-- name: DeleteKeys
-- DeleteKeys deletes up to $3 schedule keys (owed_notification_keys) of
-- the rows of [$1, $2), a dropped month's, by their index on the id; run
-- until it deletes none, each batch its own short transaction.
DELETE FROM owed_notification_keys
 WHERE notification_id IN (SELECT notification_id FROM owed_notification_keys
                            WHERE notification_id >= $1 AND notification_id < $2 LIMIT $3)

-- name: RestorePartitions
-- RestorePartitions makes the partitions an archive of [$1, $2) is
-- restored into, when retention dropped them (owed_ledger_partitions_restore,
-- internal/ledger/sql/retention.sql).
SELECT owed_ledger_partitions_restore($1, $2)
