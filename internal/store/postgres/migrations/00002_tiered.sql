-- counterd tiered mode: user TTLs survive a Redis cache miss, and rollup
-- specs are shared by every node.

-- +goose Up
ALTER TABLE counters ADD COLUMN expires_at timestamptz;
CREATE INDEX idx_counters_expires_at ON counters (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE counter_rollups (
    rollup_key varchar(255) PRIMARY KEY,
    spec       jsonb        NOT NULL,
    updated_at timestamptz  NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE counter_rollups;
DROP INDEX idx_counters_expires_at;
ALTER TABLE counters DROP COLUMN expires_at;
