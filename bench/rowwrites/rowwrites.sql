-- What one delivery's row writes cost in PostgreSQL alone, without the
-- statements around them: the five updates a delivered row took on main
-- fc72295 (the sweep's lease and queued mark, the worker's claim, its check
-- before the send, the settle), each run bare over 10,000 rows, 500 ids a
-- statement, in one transaction; then again with the row triggers and the
-- per-minute counters' statement trigger disabled, and again with only the
-- indexes a transition reads. It prints microseconds a row per step
-- (docs/performance.md, "Where the time goes"). On a migrated ledger, as its
-- owner (it drops indexes: never on a ledger that matters):
--
--   scripts/with-postgres.sh bash -c 'OWED_DATABASE_URL=$OWED_TEST_DATABASE_URL go run ./cmd/owedctl migrate up &&
--     psql -X -d "$OWED_TEST_DATABASE_URL" -f bench/rowwrites/rowwrites.sql'
\set QUIET on
\pset pager off
-- 40,000 rows of 20 tenants, pending, due now: 10,000 for each variant.
INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload)
SELECT 't' || (g % 20), 'r' || g, 'sandbox', 'k', 'ref' || g, now() - interval '1 second', now() + interval '1 hour', '{"text":"hello"}'
  FROM generate_series(1, 40000) g;
VACUUM ANALYZE owed_notifications;
CREATE TEMP TABLE res (variant text, step text, ms numeric, rows int);
CREATE OR REPLACE FUNCTION pg_temp.run(v text, lo int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; ids bigint[]; i int; step text; sqls text[] := ARRAY[
  'UPDATE owed_notifications SET state = ''leased'', lease_until = now() + interval ''60 s'', updated_at = now() WHERE id = ANY($1)',
  'UPDATE owed_notifications SET state = ''queued'', published_at = now(), lease_until = now() + interval ''600 s'', updated_at = now() WHERE id = ANY($1)',
  'UPDATE owed_notifications SET state = ''sending'', lease_until = now() + interval ''40 s'', claimed_at = now(), claim_seq = claim_seq + 1, claim_revocable = true, updated_at = now() WHERE id = ANY($1)',
  'UPDATE owed_notifications SET claim_revocable = false, updated_at = now() WHERE id = ANY($1)',
  'UPDATE owed_notifications SET state = ''delivered'', settled_at = now(), delivered_at = now(), lease_until = NULL, attempts = attempts + 1, provider = ''sandbox'', provider_message_id = ''m'' || id, updated_at = now() WHERE id = ANY($1)'];
  names text[] := ARRAY['lease','mark','claim','start','settle'];
BEGIN
  FOR s IN 1..5 LOOP
    t0 := clock_timestamp();
    FOR i IN 0..19 LOOP
      ids := ARRAY(SELECT g FROM generate_series(lo + i*500 + 1, lo + i*500 + 500) g);
      EXECUTE sqls[s] USING ids;
    END LOOP;
    INSERT INTO res VALUES (v, names[s], extract(epoch FROM clock_timestamp() - t0) * 1000, 10000);
  END LOOP;
END $$;
SELECT pg_temp.run('baseline', 0);
ALTER TABLE owed_notifications DISABLE TRIGGER owed_ledger_minutes_updated;
ALTER TABLE owed_notifications DISABLE TRIGGER owed_notifications_due_updated;
ALTER TABLE owed_notifications DISABLE TRIGGER owed_notifications_apply_intent;
SELECT pg_temp.run('no triggers', 10000);
ALTER TABLE owed_notifications ENABLE TRIGGER owed_ledger_minutes_updated;
ALTER TABLE owed_notifications ENABLE TRIGGER owed_notifications_due_updated;
ALTER TABLE owed_notifications ENABLE TRIGGER owed_notifications_apply_intent;
DROP INDEX owed_notifications_tenant_ref, owed_notifications_tenant_due, owed_notifications_owed_expiry, owed_notifications_materialised_owed, owed_notifications_payload, owed_notifications_digest, owed_notifications_settled;
SELECT pg_temp.run('5 indexes (pkey, schedule key, owed_due, pending_owed, in_flight)', 20000);
SELECT variant, step, round(ms,1) ms, round(ms*1000/rows,1) AS us_per_row FROM res ORDER BY variant, array_position(ARRAY['lease','mark','claim','start','settle'], step);
SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'owed_notifications';
