-- counterd tiered mode: the flush epoch (docs/redis-tier.md, "Deletes and
-- lives"). A FLUSHALL raises epoch by one in the transaction that
-- truncates the counter tables; from then on every counter's life is
-- above epoch << 32 (the life floor: a create after the FLUSHALL starts
-- its life past it), and every write-behind change of a lower life --
-- made before the FLUSHALL, by any node, flushed or replayed from a
-- journal after it -- is dropped as a deleted life's.

-- +goose Up
CREATE TABLE counter_flush_epoch (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    epoch      bigint      NOT NULL,
    flushed_at timestamptz
);
INSERT INTO counter_flush_epoch (one, epoch) VALUES (true, 0);

-- +goose Down
DROP TABLE counter_flush_epoch;
