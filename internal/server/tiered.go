package server

import (
	"context"
	"fmt"
	"log/slog"
)

// openTiered serves counters from Redis (hot tier) and PostgreSQL (durable
// record).
func openTiered(ctx context.Context, cfg Config, log *slog.Logger) (*node, error) {
	return nil, fmt.Errorf("%w: tiered storage (--redis/--postgres)", ErrUnsupportedMode)
}
