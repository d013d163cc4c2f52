package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// CounterMarkSep separates a counter id from an event id in the name of
// a counter's dedupe mark (contract.CounterMarker): the engine keeps one
// mark set, so a counter's marks are its id, this byte and the event id.
// Ids hold no control bytes, so two names never collide.
const CounterMarkSep = "\x1f"

var _ contract.CounterMarker = local{}

// ApplyCounterMarked makes Local a contract.CounterMarker: each op is one
// ApplyMarked batch with the marks id+CounterMarkSep+mark, so it is
// applied atomically (in memory and on disk) with them, or not at all
// when one exists. An op that fails (wrong kind, too late) stops the call
// with a *contract.BatchError naming it; the ops before it were applied.
func (l local) ApplyCounterMarked(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	if ttl <= 0 || ttl > contract.MaxTTL {
		return nil, fmt.Errorf("%w: mark ttl %v", contract.ErrInvalidArgument, ttl)
	}
	seen := make([][]string, len(ops))
	var names []string
	for i := range ops {
		op := &ops[i]
		names = names[:0]
		for _, m := range op.Marks {
			names = append(names, op.Op.ID+CounterMarkSep+m)
		}
		err := l.e.ApplyMarked(ctx, []contract.Op{op.Op}, names, ttl, wo)
		var be *contract.BatchError
		switch {
		case err == nil:
		case errors.As(err, &be) && be.Index >= 1 && errors.Is(be.Err, contract.ErrVersionConflict):
			// Some marks exist: list them all.
			for k, n := range names {
				if l.e.Marked(n) {
					seen[i] = append(seen[i], op.Marks[k])
				}
			}
			if len(seen[i]) == 0 { // expired meanwhile: the caller applies again
				seen[i] = []string{op.Marks[be.Index-1]}
			}
		case errors.As(err, &be):
			return nil, &contract.BatchError{Index: i, Err: be.Err}
		default:
			return nil, err
		}
	}
	return seen, nil
}
