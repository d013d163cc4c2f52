-- counterd tiered mode: per-hour and per-day unique-count sketches of hll
-- counters whose rollup spec keeps uniques (and their power-of-two unions),
-- written behind from Redis and read through on a Redis miss.

-- +goose Up
CREATE TABLE counter_uniques (
    counter_id varchar(255) NOT NULL,
    precision  smallint     NOT NULL,
    unit       char(1)      NOT NULL, -- 'h' hour, 'd' day
    level      smallint     NOT NULL, -- 0: one unit; k: aligned block of 2^k units
    idx        bigint       NOT NULL, -- unit number (from 1970, UTC) >> level
    sketch     bytea        NOT NULL, -- counter.HLL encoding
    updated_at timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (counter_id, precision, unit, level, idx)
);
CREATE INDEX idx_counter_uniques_updated_at ON counter_uniques (updated_at);

-- +goose Down
DROP TABLE counter_uniques;
