-- counterd tiered mode: named records, opaque to the store, that the
-- front ends keep through the backend (the rate-limit policies, space
-- 'ratelimit/policy'). Each space is an ordered list: a new record takes
-- the next value of the sequence (the end of the list), a replaced one
-- keeps its place. The policies of ratelimit_policies move here as their
-- JSON form (docs/ratelimit.md), in their order.

-- +goose Up
CREATE TABLE named_records (
    space      text        NOT NULL,
    name       text        NOT NULL,
    position   bigserial   NOT NULL,
    value      bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space, name)
);

INSERT INTO named_records (space, name, value)
SELECT 'ratelimit/policy', name, convert_to(json_build_object(
           'name', name, 'match', match, 'namespace', namespace, 'algorithm', algorithm,
           'limit', rate_limit, 'period', period_ns::text || 'ns', 'burst', burst,
           'cost', cost, 'final', final)::text, 'UTF8')
FROM ratelimit_policies ORDER BY position, name;

DROP TABLE ratelimit_policies;

-- +goose Down
CREATE TABLE ratelimit_policies (
    name       varchar(64) PRIMARY KEY,
    position   bigserial   NOT NULL,
    match      text        NOT NULL DEFAULT '',
    namespace  text        NOT NULL DEFAULT '',
    algorithm  text        NOT NULL CHECK (algorithm IN
                   ('fixed_window', 'sliding_window', 'sliding_log', 'token_bucket', 'leaky_bucket')),
    rate_limit bigint      NOT NULL CHECK (rate_limit > 0),
    period_ns  bigint      NOT NULL CHECK (period_ns > 0),
    burst      bigint      NOT NULL DEFAULT 0 CHECK (burst >= 0),
    cost       bigint      NOT NULL DEFAULT 1 CHECK (cost >= 0),
    final      boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
DROP TABLE named_records;
