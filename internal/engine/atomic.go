package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
)

// AtomicApplier is a Backend that applies a batch atomically in memory
// and on disk without an idempotency record (the embedded engine's, from
// Local). The event pipeline's consumer uses it (through ApplyMarked,
// marks.go): its batches carry their own deduplication (a marker per
// event, created in the same batch), so the record, which holds the id
// and result of every op, would only be written and compacted for nothing.
type AtomicApplier interface {
	ApplyAtomic(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) error
}

// ApplyAtomic applies ops like ApplyBatch (all or none; the error of a
// failing op is a *BatchError naming it) and, like a batch with an
// idempotency key, atomically on disk: the flush that writes any of their
// effects writes all of them. It keeps no idempotency record, returns no
// results and takes up to maxAtomicOps ops (the caller bounds its batches;
// MaxBatch bounds what clients send).
func (e *Engine) ApplyAtomic(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) error {
	if err := e.checkWrite(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return fmt.Errorf("%w: empty batch", contract.ErrInvalidArgument)
	}
	if len(ops) > maxAtomicOps {
		return fmt.Errorf("%w: %d ops, at most %d", contract.ErrBatchTooLarge, len(ops), maxAtomicOps)
	}
	for i := range ops {
		if err := ops[i].ValidateDefaulted(&e.limits); err != nil {
			return &contract.BatchError{Index: i, Err: err}
		}
	}
	rp := atomicResults.Get().(*[]contract.Result)
	if cap(*rp) < len(ops) {
		*rp = make([]contract.Result, len(ops))
	}
	res := (*rp)[:len(ops)]
	// The flusher's snapshot sees all of the batch or none.
	err := e.underGate(func() error { return e.applyMulti(ops, res, true) })
	clear(res) // drop the ids and fields they point to
	atomicResults.Put(rp)
	if err != nil {
		return err
	}
	return e.applied(ctx, len(ops), wo)
}

// atomicResults recycles the results ApplyAtomic computes and drops (a
// consumer batch of thousands of ops would allocate them anew each time).
var atomicResults = sync.Pool{New: func() any { return new([]contract.Result) }}

// maxAtomicOps bounds an ApplyAtomic batch: its locks and the flusher's
// wait for it grow with it.
const maxAtomicOps = 1 << 16

// RollupOf is Engine.RollupOf: the event pipeline's consumer coalesces
// the ops of a counter per bucket of its finest rollup.
func (l local) RollupOf(id string) (rollup.Spec, bool) { return l.e.RollupOf(id) }

func (l local) ApplyAtomic(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) error {
	return l.e.ApplyAtomic(ctx, ops, wo)
}

// underGate runs fn holding the flusher's gate for reading, so that a
// flush's snapshot sees all of what fn changes or none of it. The gate is
// released even if fn panics (applyMultiIn does on a batch it can no
// longer undo): a recovered panic must not stop the flusher for good.
func (e *Engine) underGate(fn func() error) error {
	e.gate.RLock()
	defer e.gate.RUnlock()
	return fn()
}
