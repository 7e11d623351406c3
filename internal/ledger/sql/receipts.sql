-- Receipts: what the providers later said about a send they accepted. A
-- provider's "accepted" is not "delivered": Twilio's status callback,
-- SendGrid's Event Webhook, Postmark's delivery and bounce webhooks and a
-- webhook receiver's own signed receipt say what became of the message.
-- internal/receipt verifies and parses them; the ledger keeps them here,
-- one row per receipt, whole, for the compliance question ("the SMS was
-- delivered at 12:01:07, says Twilio").
--
-- Partitioned as the ledger is, by the row's id on the same month ranges,
-- with no foreign key to owed_notifications, for the reasons the attempts
-- have none (attempts.sql); only owed_receipt_record writes receipts,
-- each for a row it found.
CREATE TABLE owed_receipts (
    id                  bigint      GENERATED ALWAYS AS IDENTITY,
    tenant_id           text        NOT NULL CHECK (tenant_id <> '' AND octet_length(tenant_id) <= 128),
    notification_id     bigint      NOT NULL,
    -- The provider family the receipt came from: twilio, sendgrid,
    -- postmark, webhook (a Sender's name up to its first ':').
    provider            text        NOT NULL CHECK (provider <> '' AND octet_length(provider) <= 64),
    provider_message_id text        NOT NULL
                        CHECK (provider_message_id <> '' AND octet_length(provider_message_id) <= 256),
    status              text        NOT NULL CHECK (status IN ('sent', 'deferred', 'delivered', 'bounced', 'failed')),
    code                text        CHECK (octet_length(code) <= 256),
    -- The provider's own time of the event; NULL when it gives none
    -- (Twilio's status callback carries no timestamp).
    occurred_at         timestamptz,
    received_at         timestamptz NOT NULL,
    CONSTRAINT owed_receipts_pkey PRIMARY KEY (notification_id, id)
) PARTITION BY RANGE (notification_id);

-- A provider that calls again with the same receipt (a retry, a replay)
-- hits this key and records nothing new. A missing occurred_at counts as
-- one value, so a replayed Twilio callback is one receipt too. The row's
-- id ends the key, as a partitioned table's unique keys must hold its
-- partition key; a message id names one row (owed_receipt_record finds it
-- by the send that returned the id), so a replay names the same row and
-- still meets its first copy.
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

-- The runtime role reads receipts in a tenant's scope and writes them only
-- through owed_receipt_record.
GRANT SELECT ON owed_receipts TO owed_runtime;
GRANT SELECT, INSERT ON owed_receipts TO owed_definer;

-- owed_receipt_rank orders receipts for a row's confirmed outcome: a final
-- word (delivered, bounced, failed) outranks an interim one (sent,
-- deferred), whatever their order of arrival.
CREATE FUNCTION owed_receipt_rank(p_status text) RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, public AS $$
SELECT CASE WHEN p_status IN ('delivered', 'bounced', 'failed') THEN 2 WHEN p_status IS NULL THEN 0 ELSE 1 END
$$;

-- owed_receipt_record records a receipt. A callback names only the
-- provider's message id, never the tenant, so this is a SECURITY DEFINER
-- function: it finds the latest accepted send with that id through that
-- provider family (the attempts keep the id of every accepted send, a
-- possible duplicate's included, while the row keeps only the latest),
-- writes the receipt under that send's tenant, and moves the row's
-- confirmed outcome when the receipt outranks the one it has (between two
-- of the same rank, the later occurred_at wins). It answers whether the id
-- was known and whether anything new was recorded. Parameters: $1 the
-- provider family, $2 its message id, $3 the status, $4 the provider's code
-- (NULL: none), $5 the provider's time of the event (NULL: it gave none),
-- $6 now (NULL: the database's clock).
CREATE FUNCTION owed_receipt_record(p_provider text, p_message_id text, p_status text, p_code text,
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
ALTER FUNCTION owed_receipt_record(text, text, text, text, timestamptz, timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_receipt_record(text, text, text, text, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_receipt_record(text, text, text, text, timestamptz, timestamptz) TO owed_runtime;

-- owed_ledger_receipt_stats is the operators' aggregate beside
-- owed_ledger_stats: of the rows settled delivered since p_since (the
-- provider accepted them), how many a provider then confirmed delivered,
-- how many bounced or failed, and how many have no final word yet (no
-- receipt, or only sent or deferred). As owed_ledger_stats does (operator.sql),
-- it reads a window of an hour or less from the rows
-- (owed_ledger_receipt_stats_rows) and a longer one from the per-minute
-- counters (owed_ledger_receipt_stats_minutes, minutes.sql): a day's
-- window read a day of rows, 20 times as many on a ledger 20 times as
-- dense, where the counters cost at most one row per hour, word and
-- slot. Both answer the same counts, exactly.
CREATE FUNCTION owed_ledger_receipt_stats(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF p_since >= now() - interval '65 minutes' THEN
        RETURN QUERY SELECT * FROM owed_ledger_receipt_stats_rows(p_since);
    ELSE
        RETURN QUERY SELECT * FROM owed_ledger_receipt_stats_minutes(p_since);
    END IF;
END
$$;
ALTER FUNCTION owed_ledger_receipt_stats(timestamptz) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_ledger_receipt_stats(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_receipt_stats(timestamptz) TO owed_runtime;

-- owed_ledger_receipt_stats_rows is owed_ledger_receipt_stats read from
-- the rows settled since p_since (owed_notifications_settled).
CREATE FUNCTION owed_ledger_receipt_stats_rows(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE sql STABLE AS $$
SELECT count(*),
       count(*) FILTER (WHERE receipt_status = 'delivered'),
       count(*) FILTER (WHERE receipt_status = 'bounced'),
       count(*) FILTER (WHERE receipt_status = 'failed'),
       count(*) FILTER (WHERE receipt_status IS NULL OR receipt_status IN ('sent', 'deferred'))
  FROM owed_notifications WHERE state = 'delivered' AND settled_at >= $1
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_receipt_stats_rows(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_receipt_stats_rows(timestamptz) TO owed_definer;

-- owed_ledger_receipt_stats_minutes is owed_ledger_receipt_stats read from
-- the counters (minutes.sql: the delivered rows, and their receipts' final
-- words, receipt_*): owed_ledger_hours for every whole hour after p_since,
-- owed_ledger_minutes for the whole minutes before the first of those
-- hours, and the rows for the rest: the part of p_since's minute after
-- it, and what settled before the receipts' words were counted
-- (owed_ledger_minutes_from.receipts). The rows without a final
-- word are the accepted rows less those with one: receipt_status holds
-- nothing but the five statuses.
-- The edges are scalar subqueries of owed_ledger_minutes_from (one row,
-- never analyzed, which the planner would otherwise guess at 1,540) and
-- the minutes are bounded by p_since's minute as well as by the edges (which
-- the planner cannot know), so the read is planned at its real size, not
-- millions of rows, and Postgres does not JIT-compile it: 1.3 s of a 1.5 s
-- day's read on bench/ledgerscale's 20M ledger (TestLongStatsAreNotCompiled).
CREATE FUNCTION owed_ledger_receipt_stats_minutes(p_since timestamptz)
RETURNS TABLE (accepted bigint, confirmed_delivered bigint, bounced bigint, failed bigint, unconfirmed bigint)
LANGUAGE sql STABLE AS $$
WITH edge0 AS MATERIALIZED (
    SELECT greatest(CASE WHEN date_trunc('minute', $1) = $1 THEN $1
                         ELSE date_trunc('minute', $1) + interval '1 minute' END,
                    (SELECT greatest(f.minute, f.receipts) FROM owed_ledger_minutes_from f)) AS at,
           (SELECT f.hours FROM owed_ledger_minutes_from f) AS hours
), edge AS MATERIALIZED (
    SELECT e.at, greatest(CASE WHEN date_trunc('hour', e.at) = e.at THEN e.at
                               ELSE date_trunc('hour', e.at) + interval '1 hour' END,
                          e.hours) AS hour
      FROM edge0 e
), parts AS (
    SELECT m.outcome, m.settled
      FROM edge e JOIN owed_ledger_minutes m ON m.minute >= e.at AND m.minute < e.hour
                                              AND m.minute >= date_trunc('minute', $1)
     WHERE m.outcome IN ('delivered', 'receipt_delivered', 'receipt_bounced', 'receipt_failed')
    UNION ALL
    SELECT h.outcome, h.settled
      FROM edge e JOIN owed_ledger_hours h ON h.hour >= e.hour
     WHERE h.outcome IN ('delivered', 'receipt_delivered', 'receipt_bounced', 'receipt_failed')
    UNION ALL
    SELECT w.outcome, 1
      FROM edge e
      JOIN owed_notifications n ON n.state = 'delivered' AND n.settled_at >= $1 AND n.settled_at < e.at
     CROSS JOIN LATERAL owed_ledger_minutes_words(n.state, n.delivered_at, n.due_at, n.receipt_status) w
), sums AS (
    SELECT coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'delivered'), 0)::bigint AS accepted,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_delivered'), 0)::bigint AS delivered,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_bounced'), 0)::bigint AS bounced,
           coalesce(sum(p.settled) FILTER (WHERE p.outcome = 'receipt_failed'), 0)::bigint AS failed
      FROM parts p
)
SELECT s.accepted, s.delivered, s.bounced, s.failed, s.accepted - s.delivered - s.bounced - s.failed FROM sums s
$$;
REVOKE EXECUTE ON FUNCTION owed_ledger_receipt_stats_minutes(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_ledger_receipt_stats_minutes(timestamptz) TO owed_definer;
