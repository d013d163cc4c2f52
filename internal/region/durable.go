package region

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Durable describes a node of a tiered region (--redis, --postgres):
// the region's state lives in a durable tier every node of the region
// shares, which records its changes in commit order. Each node ships the
// region's changes from that record (not the writes it served), resuming
// from the position each peer gateway acknowledged; with several nodes in
// the region, each ships the whole region's changes, and the receiver's
// merge (the higher version of a counter wins; tombstones delete at a
// version at least the copy's) makes every repeat a no-op.
type Durable struct {
	// Changes returns the changes after the cursor, in the order of the
	// record, at most limit, and whether more follow. A change committed
	// after a call returned is always after the last one returned.
	Changes func(ctx context.Context, after Cursor, limit int) (changes []Change, more bool, err error)
	// ExportAll calls fn with the state of every live counter (a
	// manifest of this region's state for a peer's anti-entropy).
	ExportAll func(ctx context.Context, fn func(engine.State) error) error
	// Export reads one counter's state (this region's sketch in a global
	// hll union).
	Export func(ctx context.Context, id string) (engine.State, bool, error)
	// Region is the region's backend: this region's part of a global read.
	Region contract.Backend
}

// Cursor is a position in a durable tier's record of changes.
type Cursor struct {
	Seq int64
	ID  string
}

// Change is one id's entry in the record: its position, a tombstone when
// the id was deleted since it was created (nil: none), and its state when
// it is live (nil: not).
type Change struct {
	At    Cursor
	Tomb  *engine.State
	State *engine.State
}

// durableBatch encodes the next batch for gateway p from the durable
// tier's record, from p's position; next is p's position once the peer
// has stored it.
func (r *Replicator) durableBatch(ctx context.Context, p *dest) (msg []byte, b *Batch, next Cursor, more bool, err error) {
	// Every change committed before the read is in it or an earlier batch.
	asOf := time.Now().UnixNano()
	p.mu.Lock()
	after := p.cursor
	p.mu.Unlock()
	changes, more, err := r.cfg.Durable.Changes(ctx, after, r.cfg.MaxBatchIDs)
	if err != nil {
		return nil, nil, after, false, err
	}
	b = &Batch{From: r.cfg.Name, Node: r.cfg.Node, Incarnation: r.incarnation, AsOf: asOf}
	next = after
	bytes := 0
	for i, c := range changes {
		if i > 0 && bytes >= r.cfg.MaxBatchBytes {
			more = true // the rest in the next batch, from next
			break
		}
		if c.Tomb != nil {
			b.Tombs = append(b.Tombs, *c.Tomb)
		}
		if c.State != nil {
			b.States = append(b.States, *c.State)
			bytes += len(c.State.ID) + len(c.State.Data) + 24
		}
		next = c.At
	}
	b.Complete = !more
	chunksync.SortStates(b.Tombs)
	chunksync.SortStates(b.States)
	return EncodeBatch(nil, b), b, next, more, nil
}

// durableSnapshot cuts this region's state from the durable tier.
func (r *Replicator) durableSnapshot(ctx context.Context) (*chunksync.Snapshot, error) {
	var states []engine.State
	if err := r.cfg.Durable.ExportAll(ctx, func(s engine.State) error {
		states = append(states, s)
		return nil
	}); err != nil {
		return nil, err
	}
	if !slices.IsSortedFunc(states, func(a, b engine.State) int { return strings.Compare(a.ID, b.ID) }) {
		chunksync.SortStates(states)
	}
	return chunksync.Build(states, r.cfg.Chunks)
}

// durableAggregate is this region's part of a global aggregate.
func (r *Replicator) durableAggregate(ctx context.Context, prefix string) (contract.Aggregate, error) {
	a, err := r.cfg.Durable.Region.Aggregate(ctx, prefix)
	if err != nil {
		return contract.Aggregate{}, fmt.Errorf("region: this region's aggregate: %w", err)
	}
	return a, nil
}
