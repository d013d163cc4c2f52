package contract

// Capabilities state where a backend's behaviour differs from the embedded
// engine's, so front ends can report it (HTTP GET /capabilities) and the
// conformance suite (internal/backendtest) can assert what each backend
// declares instead of one behaviour for all. Everything not named here is
// the same on every backend. Capabilities are plain values, fixed for the
// life of a backend.
type Capabilities struct {
	// Mode names the backend: "embedded", "cluster" or "tiered".
	Mode string `json:"mode"`

	// Batches is what ApplyBatch guarantees when an op fails at run time
	// (wrong kind, overflow, version conflict). Input that does not
	// validate is refused before anything applies, on every backend.
	Batches BatchAtomicity `json:"batches"`

	// MultiKeyAnyOwner: PFMERGE sources and PFCOUNT ids may be any ids.
	// False: they must have the owner of the first id, else the call fails
	// with ErrInvalidArgument (like Redis Cluster's CROSSSLOT).
	MultiKeyAnyOwner bool `json:"multi_key_any_owner"`

	// LaggingCRDTAdds: an add to a pn or sharded counter is applied by the
	// node that receives it, into its own slot, and reaches reads and
	// writes on other nodes (expire, delete) within CRDTPropagationMS
	// (replication); its Result.Value is that node's view. Its kind is
	// checked against that node's copy only, and a keyed add's record
	// reaches the other nodes with the same push (a retry on another node
	// before that applies again). False: every acknowledged write is seen
	// by the next read, and kinds are checked against the counter's one
	// state.
	LaggingCRDTAdds bool `json:"lagging_crdt_adds"`
	// CRDTPropagationMS bounds the lag of LaggingCRDTAdds, in milliseconds
	// (the replication push interval); 0 without it.
	CRDTPropagationMS int64 `json:"crdt_propagation_ms"`

	// GlobalIdempotencyKeys: a key is checked against every earlier use,
	// so a key reused with a different request fails with
	// ErrIdempotencyReuse whatever ids it names. False: a key is checked
	// where the request applies (the owner of its ids, or the receiving
	// node for a pn/sharded add); reused for ids applied elsewhere it
	// applies as a new request.
	GlobalIdempotencyKeys bool `json:"global_idempotency_keys"`

	// Limits are what the backend accepts (Op.Validate, ValidateBatch):
	// the same defaults everywhere, with the tiered mode's stricter
	// HLLPrecision and RedisHashTags.
	Limits Limits `json:"limits"`

	// SeriesWithoutSpec: every additive counter keeps time series, with
	// rollup.DefaultSpec's retention when no spec covers its id. False:
	// Series of an id no spec covers is ErrNotFound.
	SeriesWithoutSpec bool `json:"series_without_spec"`

	// FloatHashFields: hash fields may hold floats (Redis HINCRBYFLOAT,
	// HSET of a float's text; counter.Hash), and a set may give a float
	// value (Op.Float, Redis SET k 1.5). False: such an op fails with
	// ErrInvalidArgument and changes nothing (float increments of float
	// counters work on every backend).
	FloatHashFields bool `json:"float_hash_fields"`
}

// BatchAtomicity is what a failed ApplyBatch leaves behind.
type BatchAtomicity string

const (
	// BatchAtomic: all or nothing. A failing op leaves no effect of any op
	// of the batch, and no reader sees part of a batch.
	BatchAtomic BatchAtomicity = "atomic"
	// BatchAtomicPerOwner: the ops of each owner are applied together,
	// all or nothing; a batch whose ids all have one owner is atomic. With
	// several owners, the parts of the owners that succeeded stay applied
	// when another owner's part fails.
	BatchAtomicPerOwner BatchAtomicity = "atomic_per_owner"
	// BatchUndoInverse: ops apply one by one; when one fails, the adds and
	// hash adds before it are undone by their inverse, other ops (set,
	// delete, expire, pfadd, pfmerge, hdel) stay applied, and readers may
	// see the batch half applied.
	BatchUndoInverse BatchAtomicity = "undo_inverse"
)
