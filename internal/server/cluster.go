package server

import (
	"context"
	"fmt"
	"log/slog"
)

// openCluster joins a peer cluster: gossip membership, ring placement,
// forwarding and replication on top of an embedded engine.
func openCluster(ctx context.Context, cfg Config, log *slog.Logger) (*node, error) {
	return nil, fmt.Errorf("%w: peer cluster (--join)", ErrUnsupportedMode)
}
