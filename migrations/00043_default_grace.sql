-- A default grace (issue 27, "late is wrong"): a row scheduled without an
-- expires_at gets one, its due time plus the grace of its kind, else of its
-- channel, else the default, from owed_default_grace, which the sweeper
-- writes at start-up (OWED_DEFAULT_GRACE, OWED_DEFAULT_GRACE_OVERRIDES). A
-- BEFORE INSERT trigger applies it, so every writer gets it, an
-- application's SQL included; a row already past it when written is stored
-- expired. internal/ledger/sql/grace.sql says why a table and a trigger.
--
-- Expand-only: the table starts empty, so nothing changes until a sweeper
-- of this release writes it; the previous release's inserts then get the
-- grace too, which is the documented rule.

-- +goose Up
CREATE TABLE owed_default_grace (
    scope text     PRIMARY KEY
                   CHECK (scope = 'default' OR scope LIKE 'kind:_%' OR scope LIKE 'channel:_%'),
    grace interval CHECK (grace > interval '0')
);

GRANT SELECT ON owed_default_grace TO owed_runtime, owed_apps;
GRANT SELECT, INSERT, UPDATE, DELETE ON owed_default_grace TO owed_definer;

-- +goose StatementBegin
CREATE FUNCTION owed_default_grace_set(p_scopes text[], p_graces interval[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DELETE FROM owed_default_grace WHERE scope <> ALL (p_scopes);
INSERT INTO owed_default_grace (scope, grace)
SELECT s, g FROM unnest(p_scopes, p_graces) AS u(s, g)
ON CONFLICT (scope) DO UPDATE SET grace = EXCLUDED.grace;
$$;
-- +goose StatementEnd

CALL owed_definer_takes_functions(ARRAY['owed_default_grace_set']);

-- +goose StatementBegin
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
-- +goose StatementEnd

CREATE TRIGGER owed_notifications_default_grace
    BEFORE INSERT ON owed_notifications
    FOR EACH ROW
    WHEN (NEW.expires_at IS NULL)
    EXECUTE FUNCTION owed_apply_default_grace();

-- +goose Down
DROP TRIGGER owed_notifications_default_grace ON owed_notifications;

DROP FUNCTION owed_apply_default_grace();

DROP FUNCTION owed_default_grace_set(text[], interval[]);

DROP TABLE owed_default_grace;
