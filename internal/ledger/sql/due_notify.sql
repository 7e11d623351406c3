-- A row falling due now wakes the sweeper: pg_notify('owed_due', '') after
-- any statement that leaves a pending row due within a minute, whoever
-- wrote it (the API, an event fan-out, the materialiser, an application's
-- own SQL). The sweeper listens on owed_due and runs one sweep
-- (internal/sweeper/listen.go) with the cron's lease, publish and mark
-- protocol; the minute cron stays the safety net for a lost notification.
--
-- Postgres delivers a notification only when the transaction commits, so
-- the sweep it wakes sees the rows, and a rolled-back insert wakes nobody.
-- It folds identical notifications of one transaction into one, so a
-- statement touching many rows costs one wake-up. The horizon is the cron's
-- period: a row due later is leased by a cron call before it falls due
-- (with the default OWED_PUBLISH_AHEAD of 60 s). Which rows a woken sweep
-- leases is the sweep's own rule, not the trigger's.
--
-- Both functions run as the role that wrote the rows, read only the
-- statement's own rows and need no privilege beyond pg_notify. Row-level
-- security does not apply to a transition table: it holds what the
-- statement wrote, which the policy already let through.

-- Inserts: one statement-level trigger reads the statement's new rows, so a
-- 100,000-row INSERT ... SELECT checks once, and stops at the first match.
CREATE FUNCTION owed_notify_due_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM owed_due_inserted
                WHERE state = 'pending' AND due_at <= now() + interval '1 minute') THEN
        PERFORM pg_notify('owed_due', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER owed_notifications_due_inserted
    AFTER INSERT ON owed_notifications
    REFERENCING NEW TABLE AS owed_due_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION owed_notify_due_inserted();

-- Updates: a row-level trigger whose WHEN clause the executor tests without
-- calling the function, so only a row that becomes pending and due (a
-- reschedule to a new due time, an operator's redrive) calls it. A row the
-- sweep leased (owed_unpublished) handed back pending with its due time
-- unchanged (the sweep's release after a refused publish) does not notify, so a queue that refuses every
-- publish cannot make the sweeper spin. A row a worker hands back to the
-- ledger with a not-before within a minute (ledger.HandBack) wakes it too,
-- so the sweep publishes its message to surface at its not-before rather
-- than at the next cron call after it.
CREATE FUNCTION owed_notify_due_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('owed_due', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER owed_notifications_due_updated
    AFTER UPDATE OF state, due_at, not_before ON owed_notifications
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND NEW.due_at <= now() + interval '1 minute'
           AND (OLD.due_at IS DISTINCT FROM NEW.due_at
                OR (OLD.state <> 'pending' AND NOT owed_unpublished(OLD.state, OLD.published_at, OLD.updated_at))))
          OR (OLD.state = 'sending' AND owed_handed_back(NEW.state, NEW.lease_until, NEW.not_before)
              AND NEW.not_before <= now() + interval '1 minute'))
    EXECUTE FUNCTION owed_notify_due_updated();
