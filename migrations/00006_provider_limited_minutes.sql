-- One row per provider account and minute in which a worker got a 429, so
-- on-call can ask "in what fraction of minutes did we hit the provider's
-- limit" without Prometheus (owedctl stats). A 429 is not an attempt, so
-- notification_attempts never records it. Not tenant data: no RLS.

-- +goose Up
CREATE TABLE provider_limited_minutes (
    account text        NOT NULL,
    minute  timestamptz NOT NULL,
    PRIMARY KEY (account, minute)
);

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'owed_app') THEN
        GRANT SELECT, INSERT ON provider_limited_minutes TO owed_app;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE provider_limited_minutes;
