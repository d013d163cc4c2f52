-- counterd tiered mode: idempotency records written behind with the
-- effect they protect (in the write-behind batch holding the request's
-- deltas), so a keyed retry after Redis lost its data is answered from
-- here instead of being applied again. record is the binary form of
-- internal/idem (opaque to the store); expired rows are not read and are
-- purged by the maintenance loop.

-- +goose Up
CREATE TABLE idempotency_records (
    idem_key   text        PRIMARY KEY,
    record     bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    batch_id   text        NOT NULL -- the write-behind batch that committed it
);
CREATE INDEX idx_idempotency_records_expires_at ON idempotency_records (expires_at);

-- The Redis Cluster slots whose idempotency marker was ever set: a marker
-- missing for a slot listed here means Redis lost that slot's data.
CREATE TABLE idempotency_slots (
    slot integer PRIMARY KEY
);

-- +goose Down
DROP TABLE idempotency_slots;
DROP TABLE idempotency_records;
