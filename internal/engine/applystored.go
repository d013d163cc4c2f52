package engine

import (
	"context"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
)

// ApplyStored applies ops atomically (as ApplyAtomic) and, before any
// flush can see them, calls then with their results: what then returns is
// stored (StoredRecord) in the flush that writes the ops' effects, and what
// then changes meanwhile through RaiseVersion is in that flush too. So the
// effects and the records are on disk both or neither. A cluster owner uses
// it for an op and the dedupe marks that guard it (cluster/node marks.go).
// then may return an error: the ops are applied in memory anyway, the
// records are not stored, and the error is returned.
func (e *Engine) ApplyStored(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, then func(res []contract.Result) ([]StoredRecord, error)) ([]contract.Result, error) {
	if err := e.checkWrite(); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: empty batch", contract.ErrInvalidArgument)
	}
	if len(ops) > maxAtomicOps {
		return nil, fmt.Errorf("%w: %d ops, at most %d", contract.ErrBatchTooLarge, len(ops), maxAtomicOps)
	}
	for i := range ops {
		if err := ops[i].ValidateDefaulted(&e.limits); err != nil {
			return nil, &contract.BatchError{Index: i, Err: err}
		}
	}
	res := make([]contract.Result, len(ops))
	// The flusher's snapshot sees the batch, its raises and its records, or none.
	err := e.underGate(func() error {
		if err := e.applyMulti(ops, res, true); err != nil || then == nil {
			return err
		}
		recs, err := then(res)
		if err == nil {
			err = checkStored(recs)
		}
		if err == nil {
			e.addStoredLocked(recs)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := e.applied(ctx, len(ops), wo); err != nil {
		return nil, err
	}
	return res, nil
}
