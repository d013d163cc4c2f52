package contract

import (
	"context"
	"time"
)

// MarkedOp is an op guarded by dedupe marks that live with its counter:
// Marks are the ids of the events whose effect on Op.ID the op carries
// (an event id is marked once per counter it changes).
type MarkedOp struct {
	Op    Op
	Marks []string
}

// CounterMarker is implemented by backends that keep dedupe marks beside
// each counter, where the counter's state lives: at its owner in a
// cluster (replicated with the counter's state and moved by handoff with
// it), in the counter's slot in the tiered store (persisted to the
// durable tier with the effect), in the engine for the embedded one. The
// pipeline's consumer applies events through it on backends whose batches
// are not atomic across counters: each counter's change is guarded by its
// own marks, so an event is applied exactly once to every counter it
// touches wherever those counters live.
type CounterMarker interface {
	// ApplyCounterMarked applies each ops[i] atomically with its marks:
	// if none of ops[i].Marks exists (unexpired) for ops[i].Op.ID, the
	// op is applied and its marks are created, expiring after ttl,
	// durably with the op's effect (seen[i] is nil); otherwise ops[i] is
	// not applied and seen[i] lists the marks that exist, so the caller
	// can drop those events' contributions and apply the rest again.
	// Ops of different ids are independent: there is no atomicity
	// across them. An error leaves the outcome of some ops unknown;
	// calling again with the same ops is safe (their marks make it
	// idempotent). len(seen) == len(ops) when err is nil.
	ApplyCounterMarked(ctx context.Context, ops []MarkedOp, ttl time.Duration, wo WriteOptions) (seen [][]string, err error)
}
