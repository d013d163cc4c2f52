-- Hash field names may be as long on every backend (engine.MaxFieldLen:
-- 1024 bytes); varchar counts characters, so 1024 holds any valid name.
-- Widening a varchar is a catalog change, not a table rewrite.

-- +goose Up
ALTER TABLE counter_fields ALTER COLUMN field TYPE varchar(1024);

-- +goose Down
ALTER TABLE counter_fields ALTER COLUMN field TYPE varchar(255);
