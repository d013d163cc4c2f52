package counter

import (
	"errors"
	"math"
	"math/bits"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (match with errors.Is); most add context such as the field or shard.
var (
	// ErrOverflow: an increment or decrement would take a value (a shard, a
	// slot, a bucket, a field or a sum) outside the int64 range (uint64 for
	// PN slots). The receiver is left unchanged.
	ErrOverflow = errors.New("counter: increment or decrement would overflow")
	// ErrInvalid: an argument is out of range (shard index, window spec,
	// HLL precision, empty replica name, time outside the representable
	// range, ...). The receiver is left unchanged.
	ErrInvalid = errors.New("counter: invalid argument")
	// ErrCorrupt: UnmarshalBinary was handed bytes that are not a valid
	// encoding. The receiver is left unchanged.
	ErrCorrupt = errors.New("counter: corrupt encoding")
	// ErrPrecision: an HLL precision cannot be reached. HLL.Merge never
	// returns it (it folds the finer sketch down to the coarser precision);
	// HLL.Fold returns it when asked for a finer precision than the sketch has.
	ErrPrecision = errors.New("counter: hll precision mismatch")
	// ErrNotInteger: an integer increment of a hash field that holds a
	// float (Redis: "hash value is not an integer"). Nothing changes.
	ErrNotInteger = errors.New("counter: hash value is not an integer")
	// ErrFloatRange: a float increment of a hash field is infinite or
	// would make the field infinite (Redis: "increment would produce NaN
	// or Infinity"). Nothing changes.
	ErrFloatRange = errors.New("counter: increment would produce NaN or Infinity")
)

// AddInt64 returns a+b, or ErrOverflow (unwrapped, without allocating) when
// the sum does not fit in an int64. It never wraps around.
func AddInt64(a, b int64) (int64, error) {
	c := a + b
	// Overflow iff a and b have the same sign and c has the other one.
	if (a^c)&(b^c) < 0 {
		return 0, ErrOverflow
	}
	return c, nil
}

// i128 is a signed 128-bit integer, hi*2^64 + lo. It holds sums of int64 and
// uint64 values that may leave the int64 range in between (window buckets
// sliding out, PN slots merged from other replicas) without any risk of
// wrapping: every sum in this package has far fewer than 2^63 terms.
type i128 struct {
	hi int64
	lo uint64
}

func i128Of(v int64) i128   { return i128{hi: v >> 63, lo: uint64(v)} }
func i128OfU(v uint64) i128 { return i128{lo: v} }

func (a i128) add(b i128) i128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	return i128{hi: a.hi + b.hi + int64(c), lo: lo}
}

func (a i128) sub(b i128) i128 {
	lo, br := bits.Sub64(a.lo, b.lo, 0)
	return i128{hi: a.hi - b.hi - int64(br), lo: lo}
}

func (a i128) addInt64(v int64) i128 { return a.add(i128Of(v)) }

// fits reports whether a is in the int64 range.
func (a i128) fits() bool { return a.hi == int64(a.lo)>>63 }

func (a i128) less(b i128) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// clamp returns a saturated to the int64 range.
func (a i128) clamp() int64 {
	switch {
	case a.fits():
		return int64(a.lo)
	case a.hi < 0:
		return math.MinInt64
	default:
		return math.MaxInt64
	}
}

// sumMoveOK reports whether a sum may move from old to new: new must fit in
// an int64, except that a sum already outside the range (which Merge or a
// window sliding forward can produce, never an Add) may move towards zero.
func sumMoveOK(old, new i128) bool {
	if new.fits() {
		return true
	}
	if old.fits() {
		return false
	}
	if old.hi < 0 {
		return old.less(new)
	}
	return new.less(old)
}
