-- Region export (docs/postgres.md, "Region changes"): every write-behind
-- batch that changes counters stamps each changed id with one sequence
-- number, taken from the single row of region_change_seq as the batch's
-- last statement before it commits. The row lock is held until commit, so
-- batches commit in sequence order: a reader that sees sequence n
-- committed sees every lower one committed too, and a cursor (seq,
-- counter_id) never skips a row that commits later with a lower sequence.
-- base sums the versions of the counter's earlier lives (the version it
-- had at each delete): a region exports version base + counters.version,
-- which grows across a delete and a re-create.

-- +goose Up
CREATE TABLE region_change_seq (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint  NOT NULL
);
INSERT INTO region_change_seq (one, seq) VALUES (true, 1);

CREATE TABLE region_changes (
    counter_id varchar(255) PRIMARY KEY,
    seq        bigint       NOT NULL,
    base       bigint       NOT NULL DEFAULT 0
);
CREATE INDEX idx_region_changes_seq ON region_changes (seq, counter_id);
INSERT INTO region_changes (counter_id, seq) SELECT counter_id, 1 FROM counters;

-- +goose Down
DROP TABLE region_changes;
DROP TABLE region_change_seq;
