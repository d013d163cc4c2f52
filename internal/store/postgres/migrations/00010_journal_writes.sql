-- counterd tiered mode: the write ids of the journaled hot-tier writes
-- (a Redis script that applied an effect also recorded it, under a
-- unique write id, in a Redis-side journal of write-behind work; see
-- docs/redis-tier.md "Crash window"). A journaled write's deltas apply
-- in the transaction that inserts its id here, and not at all when the
-- id is already here, so the owner's batch and any replay of the journal
-- entry (after a crash, by any node) together apply it exactly once.
-- Rows older than the journal retention are purged by the maintenance
-- loop (a journal entry is replayed or trimmed long before).

-- +goose Up
CREATE TABLE journal_writes (
    write_id   text        PRIMARY KEY,
    applied_at timestamptz NOT NULL,
    batch_id   text        NOT NULL -- the write-behind batch that applied it
);
CREATE INDEX idx_journal_writes_applied_at ON journal_writes (applied_at);

-- +goose Down
DROP TABLE journal_writes;
