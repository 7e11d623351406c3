-- The default grace: late is wrong (docs/reliability.md). A row scheduled
-- without an expires_at expires its grace after its due time, whoever
-- wrote it: the API, an event fan-out, the materialiser, an application's
-- own SQL, a reschedule's new row. Before, such a row never expired: the
-- docs' example due 2026-03-02, scheduled nine months later, was delivered
-- at once.
--
-- The database applies it, so every writer gets the same rule without a
-- copy of it: a BEFORE INSERT trigger reads the grace from
-- owed_default_grace, which the sweeper writes at start-up from
-- OWED_DEFAULT_GRACE and OWED_DEFAULT_GRACE_OVERRIDES (ledger.Grace). A
-- table rather than a per-database setting, because the sweeper's role may
-- not ALTER DATABASE, and a setting a session can override would let one
-- writer opt out of the rule.

-- One grace per scope: 'default', 'kind:<kind>' or 'channel:<channel>'. A
-- NULL grace is none (the row keeps no expiry). No row for a scope is no
-- rule of its own; with no 'default' row, a row no override names keeps no
-- expiry, as before the sweeper first wrote the table.
CREATE TABLE owed_default_grace (
    scope text     PRIMARY KEY
                   CHECK (scope = 'default' OR scope LIKE 'kind:_%' OR scope LIKE 'channel:_%'),
    grace interval CHECK (grace > interval '0')
);

-- Every writer of owed_notifications reads it (the trigger runs as the
-- writer); only owed_default_grace_set writes it.
GRANT SELECT ON owed_default_grace TO owed_runtime, owed_apps;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_default_grace TO owed_definer;

-- owed_default_grace_set makes the table say p_scopes' graces (NULL: none)
-- and nothing else: the sweeper's configuration at start-up. Scopes are
-- upserted and the others deleted, so sweepers starting together never
-- fail on one another; the last one's scopes stand.
CREATE FUNCTION owed_default_grace_set(p_scopes text[], p_graces interval[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DELETE FROM owed_default_grace WHERE scope <> ALL (p_scopes);
INSERT INTO owed_default_grace (scope, grace)
SELECT s, g FROM unnest(p_scopes, p_graces) AS u(s, g)
ON CONFLICT (scope) DO UPDATE SET grace = EXCLUDED.grace;
$$;
ALTER FUNCTION owed_default_grace_set(text[], interval[]) OWNER TO owed_definer;
REVOKE EXECUTE ON FUNCTION owed_default_grace_set(text[], interval[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION owed_default_grace_set(text[], interval[]) TO owed_runtime;

-- owed_apply_default_grace gives a row inserted without an expiry the
-- grace of its kind, else of its channel, else the default: expires_at is
-- due_at plus the grace, no later than the last instant the ledger holds
-- (a row due at that very instant has no room and keeps none). A row
-- already past that expiry when it is written (created_at: the writer's
-- now, the ledger's clock for the API) is stored expired with the reason,
-- never sent: the API answers its state, expired.
CREATE FUNCTION owed_apply_default_grace() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    g interval;
    last_instant CONSTANT timestamptz := '9999-12-31 23:59:59.999999+00';
BEGIN
    SELECT d.grace INTO g FROM owed_default_grace d
     WHERE d.scope IN ('kind:' || NEW.kind, 'channel:' || NEW.channel, 'default')
     ORDER BY d.scope LIKE 'kind:%' DESC, d.scope LIKE 'channel:%' DESC
     LIMIT 1;
    IF g IS NULL OR NOT NEW.due_at < last_instant THEN
        RETURN NEW;
    END IF;
    NEW.expires_at := CASE WHEN NEW.due_at < last_instant - g THEN NEW.due_at + g ELSE last_instant END;
    IF NEW.state = 'pending' AND NEW.expires_at <= NEW.created_at THEN
        NEW.state := 'expired';
        NEW.settled_at := NEW.created_at;
        NEW.lease_until := NULL;
        NEW.last_error := 'expired before it was sent: its due time plus the default grace (' || g
                          || ', OWED_DEFAULT_GRACE) had passed when it was scheduled';
    END IF;
    RETURN NEW;
END
$$;

-- The WHEN clause is tested without calling the function, so a row that
-- names its own expiry costs nothing.
CREATE TRIGGER owed_notifications_default_grace
    BEFORE INSERT ON owed_notifications
    FOR EACH ROW
    WHEN (NEW.expires_at IS NULL)
    EXECUTE FUNCTION owed_apply_default_grace();
