package tiered

import (
	"github.com/counterd/counterd/internal/contract"
)

// Capabilities: batches are undone by inverse ops (ApplyBatch); the limits
// are Redis' (limits); Aggregate sums PostgreSQL's totals (window counters'
// in-window sums live in Redis only); every additive counter gets time
// series (Series); hash fields are integers (refuseFloatFields).
func (b *Backend) Capabilities() contract.Capabilities {
	return contract.Capabilities{
		Mode:             "tiered",
		Batches:          contract.BatchUndoInverse,
		MultiKeyAnyOwner: true,
		// Records live in Redis under the key alone (idem.go).
		GlobalIdempotencyKeys: true,
		Limits:                b.limits,
		SeriesWithoutSpec:     true,
	}
}
