package engine

import (
	"context"

	"github.com/counterd/counterd/internal/contract"
)

// StateMeta is what Export reports of a live counter besides its data: every
// local write moves Version and UpdatedAt, so a cluster node keys what it
// derives from a state's data (anti-entropy's digests) by it.
type StateMeta struct {
	Kind      contract.Kind
	Version   uint64
	UpdatedAt int64
	ExpiresAt int64
}

// Meta is the StateMeta of an exported state.
func (s *State) Meta() StateMeta {
	return StateMeta{Kind: s.Kind, Version: s.Version, UpdatedAt: s.UpdatedAt, ExpiresAt: s.ExpiresAt}
}

// StateMetaOf returns id's live StateMeta (ok false when there is none), without
// encoding the state's data.
func (e *Engine) StateMetaOf(id string) (m StateMeta, ok bool, err error) {
	if err := e.checkOpen(); err != nil {
		return StateMeta{}, false, err
	}
	if err := contract.ValidateID(id); err != nil {
		return StateMeta{}, false, err
	}
	r, ok, err := e.acquire(id, false)
	if !ok || err != nil {
		return StateMeta{}, false, err
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) {
		return StateMeta{}, false, nil
	}
	return metaLocked(r.e), true, nil
}

// metaLocked is en's Meta. Caller holds en's lock.
func metaLocked(en *entry) StateMeta {
	st := storedOf(en)
	m := StateMeta{Kind: st.kind, Version: st.version, UpdatedAt: st.updated}
	if st.ext != nil {
		m.ExpiresAt = st.ext.expires
	}
	return m
}

// EachStateMeta calls fn with the id and StateMeta of every live counter, as
// ExportAll does with their states (the same counters, without encoding
// their data and without holding engine locks while fn runs); it stops at
// the first error (of fn, or ctx's).
func (e *Engine) EachStateMeta(ctx context.Context, fn func(id string, m StateMeta) error) error {
	type item struct {
		id string
		m  StateMeta
	}
	var batch []item
	for no := 0; no < numShards; no++ {
		if err := e.checkOpen(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		batch = batch[:0]
		e.each(no, 0, func(id []byte, r *ref, _ int64) bool {
			batch = append(batch, item{string(id), metaLocked(r.e)})
			return true
		})
		for _, it := range batch {
			if err := fn(it.id, it.m); err != nil {
				return err
			}
		}
	}
	return nil
}
