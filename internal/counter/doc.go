// Package counter implements the counter kinds of counterd as plain data
// structures: no I/O, no goroutines, no clocks (time is always an argument).
// The engine owns persistence, locking and time; this package owns the
// arithmetic, the merge rules and the binary encodings.
//
// The kinds:
//
//   - Sharded: N int64 sub-counters whose value is their sum.
//   - PN: a PN-counter CRDT; per-replica grow-only P and N slots merged by
//     per-slot maximum, value sum(P) - sum(N).
//   - HLL: a HyperLogLog sketch estimating distinct items, sparse while
//     small; sketches of different precisions merge by folding the finer
//     one down, which is exact.
//   - Window: hits in time buckets over a sliding or fixed window, a ring of
//     Span/Granularity buckets aligned to the Unix epoch.
//   - Hash: named int64 fields changed atomically, several at a time.
//
// Arithmetic never wraps around: an increment that would leave the int64
// range (uint64 for PN slots) fails with an error wrapping ErrOverflow, and a
// failed call leaves the counter unchanged. Bad arguments wrap ErrInvalid.
//
// Each kind implements encoding.BinaryMarshaler and BinaryUnmarshaler with a
// compact varint encoding that starts with a per-kind format byte (the
// version: a future incompatible layout gets a new byte). Encodings are
// canonical: equal states encode to equal bytes. UnmarshalBinary never
// panics, sizes its allocations by the input length (and, for Window, by the
// validated spec), rejects malformed or impossible input (bad lengths,
// unsorted or duplicate keys, out-of-range values, non-minimal varints,
// trailing bytes) with an error wrapping ErrCorrupt, and leaves the receiver
// unchanged on error. A Window also has a delta encoding (format byte 0x42,
// window_delta.go): the buckets written since its caller stored it whole,
// which ApplyDelta puts back over the decoded whole encoding.
//
// None of the types is safe for concurrent use: the caller serialises
// access. Their read methods (Value, Count, Sum, Get, ...) never modify the
// receiver, so a sync.RWMutex with readers under RLock is enough.
package counter
