package contract

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/idem"
)

var (
	ErrInvalidID        = errors.New("engine: invalid id")
	ErrInvalidArgument  = errors.New("engine: invalid argument")
	ErrWrongKind        = errors.New("engine: operation against a counter of the wrong kind")
	ErrOverflow         = errors.New("engine: increment or decrement would overflow")
	ErrVersionConflict  = errors.New("engine: version conflict")
	ErrNotFound         = errors.New("engine: no such counter")
	ErrBatchTooLarge    = errors.New("engine: batch too large")
	ErrIdempotencyReuse = idem.ErrReuse // "engine: idempotency key reused with a different request"
	// ErrNotFloat: a float increment is not a number (counter.ParseFloat),
	// like Redis's "value is not a valid float".
	ErrNotFloat = errors.New("engine: value is not a valid float")
	// ErrFloatRange: a float increment is infinite or would make the value
	// leave the float range (Redis: "increment would produce NaN or
	// Infinity"). The value is unchanged.
	ErrFloatRange = errors.New("engine: increment would produce NaN or Infinity")
	// ErrNotInteger: an integer add to a float counter whose value is not
	// an integer (Redis: "value is not an integer or out of range").
	// An integer add to a float hash field says HashNotInteger in its
	// message (Redis words that case differently).
	ErrNotInteger = errors.New("engine: value is not an integer")
	ErrClosed     = errors.New("engine: closed")
	// ErrUnavailable: a backend that crosses a network (tiered store, cluster
	// peer) could not reach what it needs; the request may be retried.
	ErrUnavailable = errors.New("engine: unavailable")
)

// HashNotInteger is in the message of an ErrNotInteger from an integer add
// to a float hash field (Redis: "hash value is not an integer"), also
// across a cluster peer call, which keeps messages.
const HashNotInteger = "hash value is not an integer"

// MaxIDLen is the longest counter id accepted, in bytes.
const MaxIDLen = 255

// ValidateID reports whether id is a valid counter id: 1..255 bytes of
// printable UTF-8 (no control characters). The error wraps ErrInvalidID.
func ValidateID(id string) error {
	if len(id) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidID)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidID, len(id), MaxIDLen)
	}
	i := 0
	for ; i+8 <= len(id); i += 8 {
		// Eight bytes at a time: any byte < 0x20 or > 0x7e sends the whole
		// id to the byte loop below.
		if !printable8(binary.LittleEndian.Uint64([]byte(id[i : i+8]))) {
			break
		}
	}
	if i < len(id) && i+8 > len(id) && i >= 8 && printable8(binary.LittleEndian.Uint64([]byte(id[len(id)-8:]))) {
		// Every word passed (no break): check the tail as the last eight
		// bytes, overlapping checked ones.
		return nil
	}
	for ; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: byte %d is a control character", ErrInvalidID, i)
		} else if c >= 0x80 {
			return validateUTF8ID(id, i)
		}
	}
	return nil
}

// printable8 reports whether the eight bytes of w are all in 0x20..0x7e.
func printable8(w uint64) bool {
	return (w-lo8*0x20)&^w&hi8 == 0 && ((w+lo8*(127-0x7e))|w)&hi8 == 0
}

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

func validateUTF8ID(id string, from int) error {
	for i := from; i < len(id); {
		r, n := utf8.DecodeRuneInString(id[i:])
		if (r == utf8.RuneError && n == 1) || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%w: byte %d is not printable UTF-8", ErrInvalidID, i)
		}
		i += n
	}
	return nil
}

// Kind is the kind of a counter, fixed by its first write.
type Kind uint8

const (
	KindNone    Kind = iota // no such counter
	KindCounter             // exact int64 with version and TTL
	KindSharded             // N sub-counters summed on read
	KindPN                  // PN-counter CRDT
	KindHLL                 // HyperLogLog unique count
	KindWindow              // time buckets over a sliding or fixed window
	KindHash                // named int64 fields
	KindFloat               // decimal value added like Redis INCRBYFLOAT (counter.Float)

	KindLast = KindFloat
)

var kindNames = [...]string{"none", "counter", "sharded", "pn", "hll", "window", "hash", "float"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ParseKind parses a kind name as printed by Kind.String. "" parses as KindNone.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return KindNone, nil
	}
	for i, n := range kindNames {
		if n == s {
			return Kind(i), nil
		}
	}
	return KindNone, fmt.Errorf("%w: unknown kind %q", ErrInvalidArgument, s)
}

// Additive reports whether Add applies to counters of this kind.
func (k Kind) Additive() bool {
	return k == KindCounter || k == KindSharded || k == KindPN || k == KindWindow
}

// Durability says when a mutation is acknowledged.
type Durability uint8

const (
	DurabilityDefault Durability = iota // the engine's configured default
	Async                               // from memory; durable within the flush interval
	Sync                                // after the write is fsynced (group commit)
)

func (d Durability) String() string {
	switch d {
	case Async:
		return "async"
	case Sync:
		return "sync"
	}
	return "default"
}

// ParseDurability parses "sync", "async" or "" (default).
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "":
		return DurabilityDefault, nil
	case "async":
		return Async, nil
	case "sync":
		return Sync, nil
	}
	return DurabilityDefault, fmt.Errorf("%w: durability must be sync or async, not %q", ErrInvalidArgument, s)
}

// OpType names a mutation.
type OpType uint8

const (
	OpAdd     OpType = iota + 1 // Delta to an additive counter (Kind picks or auto-detects)
	OpSet                       // counter: Value, optional ExpectedVersion, optional TTL
	OpDelete                    // any kind
	OpExpire                    // any kind: TTL > 0 sets a time to live, TTL == 0 removes it, TTL < 0 deletes the counter
	OpPFAdd                     // hll: Items
	OpPFMerge                   // hll: union of Sources into ID
	OpHAdd                      // hash: add Fields atomically
	OpHDel                      // hash: delete Names
	// OpHSet sets hash fields (Fields, Delta is the new value) like Redis
	// HSET, or with SetMode SetIfAbsent only absent ones (HSETNX); Result
	// Value is the number of fields created.
	OpHSet
)

var opNames = [...]string{"", "add", "set", "delete", "expire", "pfadd", "pfmerge", "hadd", "hdel", "hset"}

func (t OpType) String() string {
	if int(t) < len(opNames) && t != 0 {
		return opNames[t]
	}
	return fmt.Sprintf("op(%d)", t)
}

// Op is one mutation. Only the fields its Type uses are read.
type Op struct {
	Type OpType
	ID   string

	// Kind, for OpAdd: KindNone adds to whatever additive kind the counter
	// already has and creates a KindCounter if it does not exist. Any other
	// additive kind creates that kind or requires the existing one to match.
	Kind Kind

	Delta int64 // OpAdd
	// Float, for OpAdd with Kind KindFloat: the increment as decimal text
	// (counter.ParseFloat's grammar, Redis INCRBYFLOAT's). A float add to
	// a counter of kind counter makes it a float counter; an integer add
	// (Kind KindNone or KindCounter) to a float counter whose value is an
	// integer makes it a counter again, as Redis's INCR after INCRBYFLOAT.
	// For OpSet: a float value in canonical text (counter.CanonicalFloat)
	// that the counter takes as kind float, Value 0 (Redis SET of a
	// float's text).
	Float string

	Value int64 // OpSet
	// ExpectedVersion, for OpSet when CheckVersion is set: the write applies
	// only if the counter's version equals it (0 = must not exist).
	ExpectedVersion uint64
	CheckVersion    bool
	// SetMode, for OpSet: SetAlways, SetIfAbsent (Redis NX) or SetIfExists (XX).
	SetMode SetMode
	// KeepTTL, for OpSet: keep an existing TTL instead of clearing it.
	KeepTTL bool

	TTL time.Duration // OpExpire; OpSet when > 0
	// ExpireAt, when not 0, is an absolute expiry (unix ns) that replaces
	// TTL for OpExpire and OpSet (Redis EXAT/PXAT): the stored expiry is
	// exactly it, whenever the op is applied. At or before the apply time,
	// OpExpire deletes the counter. Backends that store relative TTLs call
	// ResolveExpireAt.
	ExpireAt int64

	Items        [][]byte             // OpPFAdd
	Sources      []string             // OpPFMerge (ID is the destination, and is included in the union)
	Fields       []counter.FieldDelta // OpHAdd
	Names        []string             // OpHDel
	Window       counter.WindowSpec   // OpAdd creating a KindWindow (zero: engine default)
	Shards       int                  // OpAdd creating a KindSharded (0: engine default)
	Shard        int                  // OpAdd on KindSharded: shard index, or -1 for any
	HLLPrecision uint8                // OpPFAdd/OpPFMerge creating a KindHLL (0: engine default)
	// Estimate, for OpPFAdd: also set Result.Value to the estimate after the
	// add (costs a pass over the registers, so RESP PFADD does not ask).
	Estimate bool
	// At, for OpAdd and OpPFAdd, is the event's own time (unix ns; 0 =
	// the apply time): a window counter counts the add in At's bucket and
	// rollups in At's minute/hour/day/month buckets and hour/day sketches
	// (docs/time.md). It must lie in 1900..2200 (ErrInvalidArgument). An
	// add to a window counter whose At is older than the window (of the
	// apply time, or of the newest bucket seen) is refused with
	// ErrTooLate, and a window counts an At after the apply time at the
	// apply time; rollup buckets past their retention drop it, and an add
	// to a rolled-up counter that no kept bucket would hold is ErrTooLate.
	// A limit on future times (clock skew) is the front ends'
	// (--events-max-skew).
	At int64
}

// Event times are bounded like rollup queries: 1900-01-01 to 2200-01-01 UTC.
var (
	MinAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	MaxAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
)

// ValidateAt checks an event time for Op.At: 0, or in 1900..2200.
func ValidateAt(at int64) error {
	if at != 0 && (at < MinAt || at >= MaxAt) {
		return fmt.Errorf("%w: event time %s is outside 1900..2200", ErrInvalidArgument, time.Unix(0, at).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ResolveExpireAt turns ExpireAt into the TTL it means at now (negative:
// already past), for backends that store relative TTLs.
func (op *Op) ResolveExpireAt(now time.Time) {
	if op.ExpireAt == 0 {
		return
	}
	ttl := time.Duration(op.ExpireAt - now.UnixNano())
	switch {
	case ttl > 0:
	case op.Type == OpExpire:
		ttl = -1
	default: // OpSet: expires at once
		ttl = time.Nanosecond
	}
	op.TTL, op.ExpireAt = ttl, 0
}

// SetMode qualifies OpSet like Redis SET NX/XX.
type SetMode uint8

const (
	SetAlways   SetMode = iota
	SetIfAbsent         // NX
	SetIfExists         // XX
)

// Result is what a mutation returns. It is also what an idempotent retry
// returns, so it is a plain value that encodes losslessly as JSON.
type Result struct {
	ID   string `json:"id"`
	Kind Kind   `json:"kind"`
	// Value is the new value: the sum for sharded, pn and window counters,
	// the number of fields removed for OpHDel, the estimate after OpPFMerge.
	// OpPFAdd estimates only when Op.Estimate is set.
	Value int64 `json:"value"`
	// Float is a float counter's new value as decimal text (Value is 0).
	Float   string `json:"float,omitempty"`
	Version uint64 `json:"version"` // new version
	// Changed reports whether the op changed state: false for SET NX/XX that
	// did not apply, DEL of a missing counter, PFADD that altered no register.
	Changed bool            `json:"changed"`
	Fields  []counter.Field `json:"fields,omitempty"` // OpHAdd: the new values of the fields it touched
	// Replayed is set when the result came from the idempotency table
	// instead of applying the op again.
	Replayed bool `json:"-"`
}

// WriteOptions apply to one mutation or batch.
type WriteOptions struct {
	Durability Durability
	// IdempotencyKey, when not empty, makes the mutation idempotent: a retry
	// with the same key within the retention returns the first Result (with
	// Replayed set) and does not apply again, also after a restart.
	IdempotencyKey string
}

// View is a consistent read of one counter.
type View struct {
	ID        string
	Kind      Kind // KindNone when the counter does not exist
	Exists    bool
	Value     int64  // value, sum, merged pn value, hll estimate or window sum; 0 for hash and float
	Float     string // float: the value as decimal text, as Redis answers it
	Version   uint64
	UpdatedAt time.Time
	ExpiresAt time.Time // zero without a TTL

	Shards []int64 // sharded: this node's shards
	// ShardSlots, for sharded: every replica's slot (this node's Sum is the
	// sum of Shards); Value is the sum of their Sums.
	ShardSlots []counter.ShardedSlot
	Replicas   []counter.PNSlot // pn
	StdError   float64          // hll: relative standard error of Value
	Precision  uint8            // hll
	Fields     []counter.Field  // hash, sorted by name
	Window     counter.WindowSpec
	Buckets    []counter.Bucket // window: buckets inside the window, oldest first
}

// Aggregate is the sum over counters whose id starts with a prefix.
type Aggregate struct {
	Prefix string
	Value  int64 // sum of Value of additive counters
	Count  int   // number of counters summed
}
