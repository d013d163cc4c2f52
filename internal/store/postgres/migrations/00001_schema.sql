-- counterd PostgreSQL tier: schema from seed 001, in valid PostgreSQL.
-- All timestamps are timestamptz (UTC). Partitions of the partitioned
-- tables are created by the store (EnsurePartitions), not here.

-- +goose Up
CREATE TABLE counters (
    counter_id   varchar(255) PRIMARY KEY,
    value        bigint       NOT NULL DEFAULT 0,
    version      bigint       NOT NULL DEFAULT 0,
    shard_count  integer      NOT NULL DEFAULT 1,
    counter_type varchar(50)  NOT NULL,
    created_at   timestamptz  NOT NULL DEFAULT now(),
    updated_at   timestamptz  NOT NULL DEFAULT now(),
    last_sync_at timestamptz,
    config       jsonb        NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX idx_counters_counter_type ON counters (counter_type);
CREATE INDEX idx_counters_updated_at ON counters (updated_at DESC);

-- One row per shard of a sharded counter: concurrent flushes of a hot
-- counter touch different rows. (The seed's extra index on
-- (counter_id, shard_id) duplicates the primary key and is omitted.)
CREATE TABLE counter_shards (
    counter_id varchar(255) NOT NULL REFERENCES counters (counter_id) ON DELETE CASCADE,
    shard_id   integer      NOT NULL,
    value      bigint       NOT NULL DEFAULT 0,
    updated_at timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (counter_id, shard_id)
);

-- Minute buckets of increments, one partition per calendar month (UTC).
CREATE TABLE counter_timeseries (
    counter_id       varchar(255) NOT NULL,
    bucket_timestamp timestamptz  NOT NULL,
    value            bigint       NOT NULL DEFAULT 0,
    PRIMARY KEY (counter_id, bucket_timestamp)
) PARTITION BY RANGE (bucket_timestamp);
CREATE INDEX idx_counter_timeseries_time ON counter_timeseries (counter_id, bucket_timestamp DESC);

-- Hour/day/month roll-ups maintained by the write-behind flush.
CREATE TABLE counter_aggregates (
    counter_id   varchar(255) NOT NULL,
    granularity  varchar(20)  NOT NULL CHECK (granularity IN ('minute', 'hour', 'day', 'month')),
    period_start timestamptz  NOT NULL,
    value        bigint       NOT NULL,
    PRIMARY KEY (counter_id, granularity, period_start)
);
CREATE INDEX idx_counter_aggregates_period ON counter_aggregates (counter_id, granularity, period_start DESC);
CREATE INDEX idx_counter_aggregates_start ON counter_aggregates (period_start);

-- Exactly-once write-behind: a batch id is inserted in the same
-- transaction as the batch's effects, so a retried flush is a no-op.
-- Replaces the seed's counter_sync_queue (see docs/postgres.md).
CREATE TABLE counter_sync_batches (
    batch_id   varchar(128) PRIMARY KEY,
    applied_at timestamptz  NOT NULL DEFAULT now(),
    deltas     integer      NOT NULL DEFAULT 0
);
CREATE INDEX idx_counter_sync_batches_applied_at ON counter_sync_batches (applied_at);

-- Snapshots: one row per (snapshot, counter); counter_snapshot_sets says
-- when each snapshot was taken (so "no snapshot yet" differs from "0").
CREATE TABLE counter_snapshot_sets (
    snapshot_id bigserial   PRIMARY KEY,
    taken_at    timestamptz NOT NULL DEFAULT now(),
    counters    bigint      NOT NULL DEFAULT 0
);
CREATE INDEX idx_counter_snapshot_sets_taken_at ON counter_snapshot_sets (taken_at DESC);

CREATE TABLE counter_snapshots (
    snapshot_id        bigint       NOT NULL REFERENCES counter_snapshot_sets (snapshot_id) ON DELETE CASCADE,
    counter_id         varchar(255) NOT NULL,
    value              bigint       NOT NULL,
    version            bigint       NOT NULL DEFAULT 0,
    snapshot_timestamp timestamptz  NOT NULL,
    PRIMARY KEY (snapshot_id, counter_id)
);
CREATE INDEX idx_counter_snapshots_time ON counter_snapshots (counter_id, snapshot_timestamp DESC);

-- Audit log (optional per namespace), one partition per month.
CREATE TABLE counter_audit_log (
    id          bigserial    NOT NULL,
    counter_id  varchar(255) NOT NULL,
    operation   varchar(20)  NOT NULL,
    delta       bigint,
    old_value   bigint,
    new_value   bigint,
    user_id     varchar(255),
    batch_id    varchar(128),
    "timestamp" timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (id, "timestamp")
) PARTITION BY RANGE ("timestamp");
CREATE INDEX idx_counter_audit_log_counter ON counter_audit_log (counter_id, "timestamp" DESC);

-- HyperLogLog sketches (binary form owned by the engine).
CREATE TABLE counter_hll (
    counter_id varchar(255) PRIMARY KEY,
    sketch     bytea        NOT NULL,
    updated_at timestamptz  NOT NULL DEFAULT now()
);

-- Fields of hash counters.
CREATE TABLE counter_fields (
    counter_id varchar(255) NOT NULL,
    field      varchar(255) NOT NULL,
    value      bigint       NOT NULL DEFAULT 0,
    updated_at timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (counter_id, field)
);

-- +goose Down
DROP TABLE counter_fields;
DROP TABLE counter_hll;
DROP TABLE counter_audit_log;
DROP TABLE counter_snapshots;
DROP TABLE counter_snapshot_sets;
DROP TABLE counter_sync_batches;
DROP TABLE counter_aggregates;
DROP TABLE counter_timeseries;
DROP TABLE counter_shards;
DROP TABLE counters;
