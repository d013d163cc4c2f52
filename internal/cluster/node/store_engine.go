package node

import (
	"context"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// State is one counter's replicable state.
type State = engine.State

// EngineStore adapts the embedded engine to Store. The engine's NodeID must
// be the cluster node id: pn counters use it as this node's slot name.
func EngineStore(e *engine.Engine) Store { return engineStore{Backend: engine.Local(e), e: e} }

type engineStore struct {
	contract.Backend
	e *engine.Engine
}

func (s engineStore) Export(id string) (State, bool, error) { return s.e.Export(id) }

func (s engineStore) VersionOf(id string) (uint64, contract.Kind, bool, error) {
	return s.e.VersionOf(id)
}

func (s engineStore) ExportAll(ctx context.Context, fn func(State) error) error {
	return s.e.ExportAll(ctx, fn)
}

func (s engineStore) MetaOf(id string) (engine.StateMeta, bool, error) { return s.e.StateMetaOf(id) }

func (s engineStore) EachMeta(ctx context.Context, fn func(string, engine.StateMeta) error) error {
	return s.e.EachStateMeta(ctx, fn)
}

func (s engineStore) Merge(ctx context.Context, states []State, wo contract.WriteOptions) (int, error) {
	return s.e.Merge(ctx, states, wo)
}

func (s engineStore) RaiseVersion(id string, floor uint64) (uint64, bool, error) {
	return s.e.RaiseVersion(id, floor)
}

func (s engineStore) IdemRecords(since int64, fn func(engine.IdemRecord)) error {
	return s.e.IdemRecords(since, fn)
}

func (s engineStore) Drop(ctx context.Context, id string, version uint64) (bool, error) {
	return s.e.Drop(ctx, id, version)
}

func (s engineStore) MergeRecords(ctx context.Context, states []State, wo contract.WriteOptions, then func() []engine.StoredRecord) (int, error) {
	return s.e.MergeRecords(ctx, states, wo, then)
}

func (s engineStore) ApplyStored(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, then func([]contract.Result) ([]engine.StoredRecord, error)) ([]contract.Result, error) {
	return s.e.ApplyStored(ctx, ops, wo, then)
}

func (s engineStore) StoredRecords(since int64, fn func(engine.StoredRecord)) error {
	return s.e.StoredRecords(since, fn)
}

// SetQuotas gives the engine c's limits that apply to one key
// (max_hash_fields, checked at the hash's owner); max_keys are the
// cluster's (quota.go).
func (s engineStore) SetQuotas(c *quota.Config) { s.e.SetQuotas(c) }

func (s engineStore) SetExpireHook(fn func(id string)) { s.e.SetExpireHook(fn) }
