-- Float counters (kind 'float') keep their value as the decimal text Redis
-- INCRBYFLOAT answers (exact, not a double): counters.float_value. Their
-- counters.value stays 0, so a float that becomes a counter again (an
-- integer add, as in Redis) starts from the absolute value it is given.

-- +goose Up
ALTER TABLE counters ADD COLUMN float_value text;

-- +goose Down
ALTER TABLE counters DROP COLUMN float_value;
