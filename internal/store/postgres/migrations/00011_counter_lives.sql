-- counterd tiered mode: the lives of a counter, which order a delete
-- against the deltas around it (docs/redis-tier.md, "Deletes and
-- lives"). Redis numbers each life of a counter (1, then one more every
-- time it is created again after a delete) and every write-behind delta
-- and delete carries the life it was made in. counters.life is the life
-- the row holds; counter_deaths.dead_life the highest life deleted. A
-- delta applies only when its life is above dead_life and not below the
-- row's (a higher one replaces the row); a delete of life L records L and
-- removes the row only when the row's life is at most L. Rows of
-- counter_deaths older than 7 days are purged by the maintenance loop
-- (a delta of a deleted life arrives within a flush or a journal replay).

-- +goose Up
ALTER TABLE counters ADD COLUMN life bigint NOT NULL DEFAULT 1;
CREATE TABLE counter_deaths (
    counter_id text        PRIMARY KEY,
    dead_life  bigint      NOT NULL,
    deleted_at timestamptz NOT NULL
);
CREATE INDEX idx_counter_deaths_deleted_at ON counter_deaths (deleted_at);

-- +goose Down
DROP TABLE counter_deaths;
ALTER TABLE counters DROP COLUMN life;
