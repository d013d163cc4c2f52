-- counterd tiered mode: rate-limit policies, shared by every node
-- (ratelimit.PolicyStore). The list is ordered by position: a new policy
-- takes the next value of the sequence (the end of the list), a replaced
-- one keeps its place.

-- +goose Up
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

-- +goose Down
DROP TABLE ratelimit_policies;
