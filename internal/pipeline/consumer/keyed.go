package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// On a cluster a batch is atomic per owner, so a marker counter cannot
// share a batch with the effects it guards (their owners differ). There
// each event is applied as one batch of its ops with the idempotency key
// EventKey(id): the cluster splits it by owner, and every owner applies
// its part and keeps the key's record in the same atomic engine batch
// (and replicates the record, so a new owner after a failover replays
// too). A redelivered event, or a copy of it with the same content, makes
// the same parts under the same key and each owner replays its part
// instead of applying it again; a copy with other content fails with
// ErrIdempotencyReuse and is counted as a duplicate. Events are applied
// with sync durability, keyedParallel at a time, before the stream's
// offsets are committed.

// keyedParallel is how many events a consumer applies at once on a
// cluster (each a round trip to one or more owners).
const keyedParallel = 32

// EventKey is the idempotency key of event id's batch on a cluster.
func EventKey(id string) string {
	k := "pipeline:event:" + id
	if len(k) > engine.MaxIdempotencyKeyLen {
		sum := sha256.Sum256([]byte(id))
		k = "pipeline:event:#" + hex.EncodeToString(sum[:16])
	}
	return k
}

// applyKeyed applies evs, one keyed batch each. An op the engine refuses
// dead-letters its event (the event's parts on other owners may have
// applied: atomic per owner only); an unavailable backend is an error, and
// the caller applies the same records again.
func (a *Applier) applyKeyed(ctx context.Context, evs []*pending, dead *[]stream.DeadLetter) error {
	var (
		mu       sync.Mutex // guards firstErr and deadAt
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan *pending)
	)
	deadAt := make(map[*pending]string)
	for range min(keyedParallel, len(evs)) {
		wg.Go(func() {
			for p := range next {
				ops := make([]engine.Op, len(p.hits))
				for i := range p.hits {
					ops[i] = p.hits[i].Op
				}
				res, err := a.be.ApplyBatch(ctx, ops, engine.WriteOptions{Durability: engine.Sync, IdempotencyKey: EventKey(p.id)})
				switch {
				case err == nil && len(res) > 0 && res[0].Replayed:
					a.m.Events.WithLabelValues("duplicate").Inc()
				case err == nil:
					a.m.Events.WithLabelValues("applied").Inc()
					a.m.Batches.Inc()
				case errors.Is(err, engine.ErrIdempotencyReuse):
					a.m.Events.WithLabelValues("duplicate").Inc() // a copy of the id with other content
				case errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil:
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("consumer: apply event %q: %w", p.id, err)
					}
					mu.Unlock()
				default:
					mu.Lock()
					deadAt[p] = fmt.Sprintf("apply: %v", err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range evs {
		next <- p
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for _, p := range evs { // in record order
		if r, ok := deadAt[p]; ok {
			*dead = append(*dead, stream.DeadLetter{Record: p.rec, Reason: r})
		}
	}
	return nil
}
