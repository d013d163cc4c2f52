// Package rollup keeps a counter's history: its increments summed into
// minute, hour, day and month buckets, and (for hll counters) the items it
// saw in per-hour and per-day HyperLogLog sketches, each with its own
// retention.
//
// How: a State holds, per kept granularity, the open chunk — the buckets of
// the current hour (minute buckets), day (hour buckets), month (day
// buckets) or year (month buckets) — and, per sketch unit, the open sketch.
// Every increment adds to the open bucket of each granularity, so hour, day
// and month buckets are exact sums of the minute buckets below them and
// minute buckets can be dropped at their retention without losing the
// coarser totals ("compaction" costs nothing). When time moves past an open
// chunk or sketch it is closed: it waits in the State until the engine's
// flusher has written it, then only the store holds it. The engine stores
// the open part (the head) and the closed chunks in Pebble under their own
// key prefixes.
//
// Unique counts over the last N days merge stored sketches. Besides one
// sketch per day, the store keeps the union of every aligned block of 2^k
// days (k = 1..DayLevels), written once when the block is complete, so any
// range of N days is the union of at most about 2*log2(N) stored sketches
// (BlockUpdates, Decompose).
//
// Time is always passed in (unix nanoseconds, UTC buckets); the package does
// no I/O: Store is how queries read what the engine stored.
//
// A State is not safe for concurrent use: the engine holds the counter's
// lock around every call. Views taken from a State are immutable and may be
// used after the lock is released.
package rollup
