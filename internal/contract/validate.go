package contract

import (
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// Limits bound what one request may carry. Every backend checks ops with
// Op.Validate and batches with ValidateBatch against its Limits before
// anything reaches a store, so the same request is refused with the same
// error on every backend; a backend that cannot store something the
// defaults allow says so with a stricter field (HLLPrecision,
// RedisHashTags), which Backend.Capabilities reports.
type Limits struct {
	MaxBatch    int // ops per batch (default 1000)
	MaxItems    int // items of one PFADD, fields of one HADD/HDEL, sources of one PFMERGE (default MaxItems)
	MaxFieldLen int // bytes in a hash field name (default MaxFieldLen)
	MaxShards   int // shards of a sharded counter (default 1024)
	// MaxWindowBuckets bounds span/granularity of a window counter, and so
	// its memory (16 bytes a bucket). Default and ceiling
	// counter.MaxWindowBuckets (3600), which decoders enforce on stored
	// and replicated windows too.
	MaxWindowBuckets int
	MaxTTL           time.Duration // longest time to live (default MaxTTL)
	// HLLPrecision, when not 0, is the only HyperLogLog precision accepted
	// (the tiered mode keeps Redis's 14); 0 accepts every valid precision.
	HLLPrecision uint8
	// RedisHashTags refuses ids starting with '}': in a key "counter:{id}"
	// such an id would end the hash tag early, and the counter's keys
	// would not share a Redis Cluster slot.
	RedisHashTags bool
}

// MaxFieldLen is the default bound on a hash field name, in bytes.
const MaxFieldLen = 1024

// DefaultLimits returns the limits every backend starts from.
func DefaultLimits() Limits {
	return Limits{MaxBatch: 1000, MaxItems: MaxItems, MaxFieldLen: MaxFieldLen, MaxShards: 1024, MaxTTL: MaxTTL, MaxWindowBuckets: counter.MaxWindowBuckets}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBatch <= 0 {
		l.MaxBatch = d.MaxBatch
	}
	if l.MaxItems <= 0 {
		l.MaxItems = d.MaxItems
	}
	if l.MaxFieldLen <= 0 {
		l.MaxFieldLen = d.MaxFieldLen
	}
	if l.MaxShards <= 0 {
		l.MaxShards = d.MaxShards
	}
	if l.MaxTTL <= 0 {
		l.MaxTTL = d.MaxTTL
	}
	if l.MaxWindowBuckets <= 0 || l.MaxWindowBuckets > d.MaxWindowBuckets {
		l.MaxWindowBuckets = d.MaxWindowBuckets
	}
	return l
}

// ValidateBatch checks a batch: 1..MaxBatch ops, each valid. The error of a
// bad op is a *BatchError naming its index.
func ValidateBatch(ops []Op, l Limits) error {
	l = l.WithDefaults()
	if len(ops) == 0 {
		return fmt.Errorf("%w: empty batch", ErrInvalidArgument)
	}
	if len(ops) > l.MaxBatch {
		return fmt.Errorf("%w: %d ops, at most %d", ErrBatchTooLarge, len(ops), l.MaxBatch)
	}
	for i := range ops {
		if err := ops[i].ValidateDefaulted(&l); err != nil {
			return &BatchError{Index: i, Err: err}
		}
	}
	return nil
}

// Validate checks what can be checked without state: the id, the fields its
// Type reads, and l. The error wraps ErrInvalidID, ErrInvalidArgument or
// ErrWrongKind. Zero fields of l take DefaultLimits.
func (op *Op) Validate(l Limits) error {
	l = l.WithDefaults()
	return op.ValidateDefaulted(&l)
}

// validate is Validate with l's defaults already filled in (the engine
// fills them once, at Open, instead of on every op).
// plainAdd reports whether op is an add of Delta and nothing else (no
// kind, TTL, window, shard or float): Add's arguments.
func (op *Op) PlainAdd() bool {
	return op.Type == OpAdd && op.TTL == 0 && op.HLLPrecision == 0 && op.Kind == KindNone &&
		op.Window == (counter.WindowSpec{}) && op.Shards == 0 && op.Shard == 0 && op.Float == "" && op.ExpireAt == 0 && op.At == 0
}

func (op *Op) ValidateDefaulted(l *Limits) error {
	if err := l.ValidateID(op.ID); err != nil {
		return err
	}
	return op.validateDefaultedRest(l)
}

// ValidateDefaultedValidID is ValidateDefaulted of an op whose id passed
// ValidateID already (the event pipeline's rules check each counter id
// they build): of the id, only the backend's own restriction (l) is
// checked again.
func (op *Op) ValidateDefaultedValidID(l *Limits) error {
	if err := l.backendID(op.ID); err != nil {
		return err
	}
	return op.validateDefaultedRest(l)
}

// validateDefaultedRest is ValidateDefaulted but for the op's id.
func (op *Op) validateDefaultedRest(l *Limits) error {
	if op.PlainAdd() {
		// The hottest op, a plain add: only its id needs checking.
		return nil
	}
	if op.TTL < 0 && op.Type != OpExpire { // OpExpire: negative deletes, like Redis
		return fmt.Errorf("%w: negative ttl", ErrInvalidArgument)
	}
	if op.ExpireAt < 0 || (op.ExpireAt != 0 && op.Type != OpExpire && op.Type != OpSet) {
		return fmt.Errorf("%w: expire-at only applies to expire and set", ErrInvalidArgument)
	}
	if op.At != 0 {
		if op.Type != OpAdd && op.Type != OpPFAdd {
			return fmt.Errorf("%w: an event time only applies to add and pfadd", ErrInvalidArgument)
		}
		if err := ValidateAt(op.At); err != nil {
			return err
		}
	}
	if op.TTL > l.MaxTTL {
		return fmt.Errorf("%w: ttl longer than %v", ErrInvalidArgument, l.MaxTTL)
	}
	if op.HLLPrecision != 0 {
		if err := counter.ValidatePrecision(op.HLLPrecision); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
		if l.HLLPrecision != 0 && op.HLLPrecision != l.HLLPrecision {
			return fmt.Errorf("%w: hll precision must be %d on this backend", ErrInvalidArgument, l.HLLPrecision)
		}
	}
	switch op.Type {
	case OpAdd:
		return op.validateAdd(*l)
	case OpSet:
		if op.Float != "" && (op.Value != 0 || !counter.CanonicalFloat(op.Float)) {
			return fmt.Errorf("%w: a float set takes one value, a float in canonical text, not %q", ErrInvalidArgument, clip(op.Float))
		}
		return nil
	case OpDelete, OpExpire:
		return nil
	case OpPFAdd:
		return l.maxItems(len(op.Items), "items")
	case OpPFMerge:
		if err := l.maxItems(len(op.Sources), "sources"); err != nil {
			return err
		}
		for _, s := range op.Sources {
			if err := l.ValidateID(s); err != nil {
				return err
			}
		}
		return nil
	case OpHAdd, OpHDel, OpHSet:
		return op.validateFields(*l)
	}
	return fmt.Errorf("%w: unknown op type %d", ErrInvalidArgument, op.Type)
}

func (op *Op) validateAdd(l Limits) error {
	if op.Kind == KindFloat {
		// The text itself is checked when applied, after the kind: a bad
		// increment to a counter of another kind is a wrong kind first,
		// as in Redis.
		if op.Delta != 0 || len(op.Float) > counter.MaxFloatText {
			return fmt.Errorf("%w: a float add takes its increment as text", ErrInvalidArgument)
		}
		return nil
	}
	if op.Float != "" {
		return fmt.Errorf("%w: a float increment needs kind float", ErrInvalidArgument)
	}
	if op.Kind != KindNone && !op.Kind.Additive() {
		return fmt.Errorf("%w: add to a %s counter", ErrWrongKind, op.Kind)
	}
	if op.Window != (counter.WindowSpec{}) {
		// Checked before the spec's validation so that the bound, not
		// the codec's ceiling, is what the caller is told.
		if op.Window.Granularity > 0 && op.Window.Span/op.Window.Granularity > time.Duration(l.MaxWindowBuckets) {
			return fmt.Errorf("%w: window of %v at %v has %d buckets, at most %d", ErrInvalidArgument,
				op.Window.Span, op.Window.Granularity, op.Window.Span/op.Window.Granularity, l.MaxWindowBuckets)
		}
		if err := op.Window.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
		}
	}
	if op.Shards < 0 || op.Shards > l.MaxShards {
		return fmt.Errorf("%w: shards must be in 1..%d", ErrInvalidArgument, l.MaxShards)
	}
	// Shard n > 0 names shard n-1; 0 is any shard.
	if op.Shard < 0 || op.Shard > l.MaxShards {
		return fmt.Errorf("%w: shard must be in 0..%d", ErrInvalidArgument, l.MaxShards)
	}
	return nil
}

func (op *Op) validateFields(l Limits) error {
	n := len(op.Fields) + len(op.Names)
	if n == 0 {
		return fmt.Errorf("%w: no fields", ErrInvalidArgument)
	}
	if err := l.maxItems(n, "fields"); err != nil {
		return err
	}
	for i := range op.Fields {
		f := &op.Fields[i]
		if err := l.validateField(f.Name); err != nil {
			return err
		}
		if f.Float != "" {
			if err := op.validateFieldFloat(f); err != nil {
				return err
			}
		}
	}
	for _, name := range op.Names {
		if err := l.validateField(name); err != nil {
			return err
		}
	}
	return nil
}

// validateFieldFloat checks a float field increment (OpHAdd: Redis's
// HINCRBYFLOAT parses it before it looks at the key) or value (OpHSet:
// canonical text, so that a read answers it unchanged).
func (op *Op) validateFieldFloat(f *counter.FieldDelta) error {
	switch {
	case op.Type == OpHDel:
		return fmt.Errorf("%w: hdel takes names only", ErrInvalidArgument)
	case f.Delta != 0:
		return fmt.Errorf("%w: field %q: a float field takes its value as text, not also as an integer", ErrInvalidArgument, f.Name)
	case op.Type == OpHSet:
		if !counter.CanonicalFloat(f.Float) {
			return fmt.Errorf("%w: field %q: %q is not an integer or a float in canonical text", ErrInvalidArgument, f.Name, clip(f.Float))
		}
		return nil
	}
	d, err := counter.ParseFloat(f.Float)
	if err != nil {
		return fmt.Errorf("%w: field %q: %q", ErrNotFloat, f.Name, clip(f.Float))
	}
	if d.IsInf() {
		return fmt.Errorf("%w: field %q: the increment is infinite", ErrFloatRange, f.Name)
	}
	return nil
}

// clip cuts s to 40 bytes for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func (l Limits) validateField(name string) error {
	if len(name) > l.MaxFieldLen {
		return fmt.Errorf("%w: field name longer than %d bytes", ErrInvalidArgument, l.MaxFieldLen)
	}
	return nil
}

func (l Limits) ValidateID(id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return l.backendID(id)
}

// backendID checks what l restricts of a valid id (ValidateID) beyond
// ValidateID.
func (l *Limits) backendID(id string) error {
	if l.RedisHashTags && id != "" && id[0] == '}' {
		return fmt.Errorf("%w: ids starting with '}' are not supported on this backend (Redis hash tag)", ErrInvalidID)
	}
	return nil
}

func (l Limits) maxItems(n int, what string) error {
	if n > l.MaxItems {
		return fmt.Errorf("%w: %d %s, at most %d", ErrInvalidArgument, n, what, l.MaxItems)
	}
	return nil
}
