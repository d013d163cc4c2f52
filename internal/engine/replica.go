package engine

import (
	"bytes"
	"context"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// Replication support for the cluster node (docs/cluster.md): a counter's
// state can be exported, shipped to another node and merged there.
//
// Merge rules, per kind:
//
//   - pn, sharded, hll are CRDTs and join: per-slot max (pn), per-replica
//     newest (Seq, Sum) slot (sharded, see counter.Sharded), register-wise
//     max (hll). Their versions are Lamport clocks: a merge that changes the
//     local state sets the local version to max(local, state's) + 1, so a
//     node that merged the others' states and then deletes deletes at a
//     version at least theirs. Their TTL follows the state with the higher
//     Version.
//   - counter, hash, window: the higher Version wins whole (value or state,
//     TTL, UpdatedAt, Version); an equal or lower one changes nothing. The
//     owner assigns versions, one owner at a time.
//   - A Deleted state, or one whose ExpiresAt has passed, deletes the local
//     counter when its Version >= the local version; a missing local
//     counter stays missing (the engine keeps no tombstones).
//   - A state of another kind than the live local counter replaces it when
//     its Version is higher.
//
// Rollups count the increments applied on this node (Apply); Merge does not
// feed them, so a cluster-wide series is the sum of the nodes' series, like
// Aggregate. A counter that Merge creates gets its rollup state (empty); one
// that Merge or Drop deletes has its stored rollups deleted, as for OpDelete.

// State is the replicable state of one counter: what a cluster node ships to
// replicas, to a new owner on handoff, and in anti-entropy.
type State struct {
	ID        string        `json:"id"`
	Kind      contract.Kind `json:"kind"`
	Version   uint64        `json:"version"`    // the counter's version on the node that exported it
	UpdatedAt int64         `json:"updated_at"` // unix ns
	ExpiresAt int64         `json:"expires_at"` // unix ns; 0 = no TTL
	Deleted   bool          `json:"deleted"`    // a tombstone: the counter was deleted at Version
	// Data is the kind's binary encoding (as stored on disk): the value as
	// a zigzag varint for a counter, the state's MarshalBinary otherwise.
	// Empty for a tombstone.
	Data []byte `json:"data"`
}

// StateError is the error of a Merge whose state Index is invalid; no state
// of the call was merged. It unwraps to ErrInvalidID or ErrInvalidArgument.
type StateError struct {
	Index int
	ID    string
	Err   error
}

func (s *StateError) Error() string {
	return fmt.Sprintf("merge state %d (%q): %v", s.Index, s.ID, s.Err)
}
func (s *StateError) Unwrap() error { return s.Err }

// NodeID returns the engine's replica name (Config.NodeID).
func (e *Engine) NodeID() string { return e.cfg.NodeID }

// Export returns the state of id; ok=false when it does not exist (and no
// tombstone is kept).
func (e *Engine) Export(id string) (s State, ok bool, err error) {
	if err := e.checkOpen(); err != nil {
		return State{}, false, err
	}
	if err := contract.ValidateID(id); err != nil {
		return State{}, false, err
	}
	r, ok, err := e.acquire(id, false)
	if !ok || err != nil {
		return State{}, false, err
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) {
		return State{}, false, nil
	}
	s, err = exportLocked(id, r.e)
	return s, err == nil, err
}

// VersionOf returns the version and kind of id's live state (ok false
// when there is none): what Export would report, without encoding the
// state's data (an owner checks a marked op's marks against it).
func (e *Engine) VersionOf(id string) (version uint64, kind contract.Kind, ok bool, err error) {
	if err := e.checkOpen(); err != nil {
		return 0, contract.KindNone, false, err
	}
	if err := contract.ValidateID(id); err != nil {
		return 0, contract.KindNone, false, err
	}
	r, ok, err := e.acquire(id, false)
	if !ok || err != nil {
		return 0, contract.KindNone, false, err
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) {
		return 0, contract.KindNone, false, nil
	}
	return r.e.version(), r.e.kind(), true, nil
}

// exportLocked returns the state of the live entry en. Caller holds its lock.
func exportLocked(id string, en *entry) (State, error) {
	st := storedOf(en)
	s := State{ID: id, Kind: st.kind, Version: st.version, UpdatedAt: st.updated}
	if st.ext != nil {
		s.ExpiresAt = st.ext.expires
	}
	var err error
	if s.Data, err = appendData(nil, &st); err != nil {
		return State{}, fmt.Errorf("engine: export %q: %w", id, err)
	}
	return s, nil
}

// ExportAll calls fn with the state of every live counter (for handoff and
// anti-entropy), without holding engine locks while fn runs; stops at the
// first error (of fn, or ctx's). Counters written during the call may or may
// not be included; each state is consistent.
func (e *Engine) ExportAll(ctx context.Context, fn func(State) error) error {
	var batch []State
	for no := 0; no < numShards; no++ {
		if err := e.checkOpen(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		batch = batch[:0]
		e.each(no, 0, func(id []byte, r *ref, _ int64) bool {
			var s State
			if s, err = exportLocked(string(id), r.e); err != nil {
				return false
			}
			batch = append(batch, s)
			return true
		})
		if err != nil {
			return err
		}
		for _, s := range batch {
			if err := fn(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// incoming is a validated state's decoded value and state.
type incoming struct {
	value int64
	st    any
}

// checkState validates s and decodes its Data into in.
func (e *Engine) checkState(s *State, in *incoming) error {
	if err := contract.ValidateID(s.ID); err != nil {
		return err
	}
	if s.Kind > contract.KindLast || (s.Kind == contract.KindNone && !s.Deleted) {
		return fmt.Errorf("%w: unknown kind %d", contract.ErrInvalidArgument, s.Kind)
	}
	if s.ExpiresAt < 0 {
		return fmt.Errorf("%w: negative expiry", contract.ErrInvalidArgument)
	}
	if s.Deleted {
		return nil
	}
	v, st, err := decodeData(s.Kind, s.Data)
	if err != nil {
		return fmt.Errorf("%w: %s data: %v", contract.ErrInvalidArgument, s.Kind, err)
	}
	if sh, ok := st.(*counter.Sharded); ok && sh.Replica() == "" && len(sh.Slots()) > 0 {
		return fmt.Errorf("%w: sharded data without a replica name", contract.ErrInvalidArgument)
	}
	in.value, in.st = v, st
	return nil
}

// checkStates validates states for Merge, Replace and MergeRecords: the
// first invalid one fails the call with a *StateError before anything is
// stored.
func (e *Engine) checkStates(states []State) ([]incoming, error) {
	in := make([]incoming, len(states))
	for i := range states {
		if err := e.checkState(&states[i], &in[i]); err != nil {
			return nil, &StateError{Index: i, ID: states[i].ID, Err: err}
		}
	}
	return in, nil
}

// Merge joins each state into the local counter of the same id, each state
// atomically, durable according to wo (Sync: fsynced before return, via the
// same group commit as Apply); see the rules at the top of this file. It
// returns the number of states that changed local state. Invalid states
// (bad id, unknown kind, undecodable Data) fail the whole call with a
// *StateError before anything is merged. wo.IdempotencyKey is ignored:
// merging is idempotent.
func (e *Engine) Merge(ctx context.Context, states []State, wo contract.WriteOptions) (changed int, err error) {
	if err := e.checkWrite(); err != nil {
		return 0, err
	}
	in, err := e.checkStates(states)
	if err != nil {
		return 0, err
	}
	return e.mergeAll(ctx, states, in, wo, false)
}

// Replace is Merge for a copy of another region's state
// (internal/region): counter, hash, window and float states are stored as
// sent when their Version is higher than the local counter's (or there is
// none); the CRDTs (pn, sharded, hll) join as in Merge, keeping the
// sender's replica names (a sharded state is not renamed to this node),
// and the copy takes the highest Version sent, not one more. The nodes of
// a cluster region each send the states they hold, whose CRDT slots and
// Lamport versions differ: joining never loses a slot and never counts
// one twice. A copy that has everything its one sender has exports byte
// for byte what the sender exports, so hash-addressed sync finds nothing
// to move once both agree. Tombstones and expired states delete as in
// Merge. Invalid states fail the call with a *StateError before anything
// is stored.
func (e *Engine) Replace(ctx context.Context, states []State, wo contract.WriteOptions) (changed int, err error) {
	if err := e.checkWrite(); err != nil {
		return 0, err
	}
	in, err := e.checkStates(states)
	if err != nil {
		return 0, err
	}
	return e.mergeAll(ctx, states, in, wo, true)
}

func (e *Engine) mergeAll(ctx context.Context, states []State, in []incoming, wo contract.WriteOptions, verbatim bool) (changed int, err error) {
	for i := range states {
		c, err := e.mergeOne(&states[i], &in[i], verbatim)
		if err != nil {
			return changed, err
		}
		if c {
			changed++
		}
	}
	if e.durability(wo) == contract.Sync {
		if err := e.waitDurable(ctx); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// mergeOne merges one validated state under its entry's lock.
func (e *Engine) mergeOne(s *State, in *incoming, verbatim bool) (bool, error) {
	now := e.nowNano()
	gone := s.Deleted || (s.ExpiresAt != 0 && s.ExpiresAt <= now)
	r, ok, err := e.acquire(s.ID, !gone)
	if !ok || err != nil {
		return false, err
	}
	defer r.e.unlock()
	en := r.e
	live := e.liveLocked(&r, now)
	switch {
	case gone:
		if !live || s.Version < en.version() {
			return false, nil
		}
		e.clearLocked(&r)
	case !live:
		e.adoptLocked(&r, s, in, verbatim)
	case en.kind() != s.Kind:
		if s.Version <= en.version() {
			return false, nil
		}
		e.clearLocked(&r)
		e.adoptLocked(&r, s, in, verbatim)
	case s.Kind == contract.KindPN || s.Kind == contract.KindSharded || s.Kind == contract.KindHLL:
		return e.joinLocked(&r, s, in, verbatim), nil
	default:
		if s.Version <= en.version() {
			return false, nil
		}
		en.value = in.value
		if en.ext() != nil {
			en.ext().state = in.st
		} else if in.st != nil {
			en.setExt(&ext{state: in.st})
		}
		e.setExpiresLocked(&r, s.ExpiresAt)
		en.setVersion(s.Version)
		en.updated = s.UpdatedAt
		e.markDirtyLocked(&r)
	}
	return true, nil
}

// adoptLocked makes the none entry r the counter s. Caller holds r's lock.
func (e *Engine) adoptLocked(r *ref, s *State, in *incoming, verbatim bool) {
	en := r.e
	if sh, ok := in.st.(*counter.Sharded); ok && !verbatim {
		// The sender's shards become its slot; ours start from our slot.
		_ = sh.SetReplica(e.cfg.NodeID)
		in.value = sh.Value()
	}
	en.setKind(s.Kind)
	en.setVersion(s.Version)
	en.value, en.updated = in.value, s.UpdatedAt
	if in.st != nil {
		en.setExt(&ext{state: in.st})
	}
	e.attachRollLocked(r, s.ID, s.Kind)
	e.keys.Add(1)
	if q := e.quotaSet(); q != nil {
		// A replica's or handed-off state: counted, never refused (the
		// owner that created it checked its quota).
		e.quotaAddLocked(q, r, s.ID, 1)
	}
	e.setExpiresLocked(r, s.ExpiresAt)
	e.markDirtyLocked(r)
}

// joinLocked joins the CRDT state s into the live entry r of the same kind.
// Caller holds r's lock.
func (e *Engine) joinLocked(r *ref, s *State, in *incoming, verbatim bool) bool {
	en := r.e
	changed := false
	switch st := en.ext().state.(type) {
	case *counter.PN:
		before := st.Clone()
		st.Merge(in.st.(*counter.PN))
		changed = !st.Equal(before)
		en.value = st.Value()
	case *counter.Sharded:
		changed, _ = st.Merge(in.st.(*counter.Sharded)) // both named: cannot fail
		en.value = st.Value()
	case *counter.HLL:
		before, _ := st.MarshalBinary()
		_ = st.Merge(in.st.(*counter.HLL)) // folds precisions: cannot fail
		after, _ := st.MarshalBinary()
		changed = !bytes.Equal(before, after)
	}
	if s.Version > en.version() && s.ExpiresAt != en.ext().expires {
		e.setExpiresLocked(r, s.ExpiresAt)
		changed = true
	}
	switch {
	case verbatim:
		// A copy is never written here: it keeps the highest version
		// sent, so it exports what the sender exports once it has sent
		// everything.
		if !changed && s.Version <= en.version() {
			return false
		}
		en.setVersion(max(en.version(), s.Version))
	case !changed:
		return false
	default:
		en.setVersion(max(en.version(), s.Version) + 1)
	}
	en.updated = max(en.updated, s.UpdatedAt)
	e.markDirtyLocked(r)
	return true
}

// Drop removes the local copy of id if its version still equals version
// (used after a handoff was acknowledged by the new holder); no-op
// otherwise. It reports whether it removed the counter. The removal is
// durable within the flush interval (call Flush to wait for it).
func (e *Engine) Drop(ctx context.Context, id string, version uint64) (bool, error) {
	if err := e.checkOpen(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := contract.ValidateID(id); err != nil {
		return false, err
	}
	r, ok, err := e.acquire(id, false)
	if !ok || err != nil {
		return false, err
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) || r.e.version() != version {
		return false, nil
	}
	e.clearLocked(&r)
	return true, nil
}

// RaiseVersion lifts id's version to at least floor, keeping its low 32
// bits: a cluster owner that took an id over at epoch E raises the id's
// version to E<<32 (plus the version it had) so that every state it
// writes beats any state the previous owner wrote, whatever the number of
// writes. The value is unchanged. It returns the id's version after the
// call; ok is false when id does not exist. Durable like Drop.
func (e *Engine) RaiseVersion(id string, floor uint64) (version uint64, ok bool, err error) {
	if err := e.checkOpen(); err != nil {
		return 0, false, err
	}
	if err := contract.ValidateID(id); err != nil {
		return 0, false, err
	}
	r, ok, err := e.acquire(id, false)
	if !ok || err != nil {
		return 0, false, err
	}
	defer r.e.unlock()
	if !e.liveLocked(&r, e.nowNano()) {
		return 0, false, nil
	}
	if r.e.version() < floor {
		r.e.setVersion(floor | r.e.version()&(1<<32-1)) // >= floor
		e.markDirtyLocked(&r)
	}
	return r.e.version(), true, nil
}
