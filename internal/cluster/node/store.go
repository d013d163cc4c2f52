package node

import (
	"context"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// Store is the local engine as a cluster node uses it: the Backend the front
// ends would serve in embedded mode plus the replication primitives.
// Implementations must be safe for concurrent use.
type Store interface {
	contract.Backend
	// Export returns the replicable state of id (ok false when this node has
	// never held it).
	Export(id string) (s State, ok bool, err error)
	// VersionOf returns the version and kind Export would report, without
	// the state's data (ok false when this node holds no live state).
	VersionOf(id string) (version uint64, kind contract.Kind, ok bool, err error)
	// ExportAll calls fn for every state held locally.
	ExportAll(ctx context.Context, fn func(State) error) error
	// MetaOf returns the Meta Export would report of id (ok false when
	// this node holds no live state), without the state's data.
	MetaOf(id string) (m engine.StateMeta, ok bool, err error)
	// EachMeta calls fn with the id and Meta of every state ExportAll
	// would export, without their data.
	EachMeta(ctx context.Context, fn func(id string, m engine.StateMeta) error) error
	// Merge joins states into the local ones (per-slot max for pn/sharded,
	// register max for hll, higher version wins otherwise); durable per wo.
	Merge(ctx context.Context, states []State, wo contract.WriteOptions) (changed int, err error)
	// Drop removes id if its version is still version (after a handoff).
	Drop(ctx context.Context, id string, version uint64) (bool, error)
	// RaiseVersion lifts id's version to at least floor, keeping its low
	// 32 bits and the value (an owner's epoch, epoch.go); it returns the
	// version afterwards, ok false when id does not exist.
	RaiseVersion(id string, floor uint64) (version uint64, ok bool, err error)
	// IdemRecords calls fn with the idempotency records on disk created
	// at or after since (unix ns), with the ids they wrote.
	IdemRecords(since int64, fn func(engine.IdemRecord)) error
	// MergeRecords is Merge that also stores the records then returns
	// (then runs after the merge, before any flush), in the same batch as
	// the merged states: the cluster's idempotency records (idem.go).
	MergeRecords(ctx context.Context, states []State, wo contract.WriteOptions, then func() []engine.StoredRecord) (changed int, err error)
	// StoredRecords calls fn with the stored records on disk created at
	// or after since (unix ns).
	StoredRecords(since int64, fn func(engine.StoredRecord)) error
	// ApplyStored applies ops atomically and stores the records then
	// returns (then may also RaiseVersion) in the flush that writes their
	// effects: an owner's marked ops and their dedupe marks (marks.go).
	ApplyStored(ctx context.Context, ops []contract.Op, wo contract.WriteOptions, then func([]contract.Result) ([]engine.StoredRecord, error)) ([]contract.Result, error)
}
