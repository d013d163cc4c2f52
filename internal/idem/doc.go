// Package idem is the one idempotency implementation every backend uses: the
// request fingerprint, the record a keyed mutation leaves (one binary
// format, which also reads the JSON records stored before it), the
// claim/lease state machine that applies a keyed request at most once
// (Do), and the retention check. A backend supplies only where records
// live, through Store: the embedded engine its in-memory table and Pebble,
// a cluster node its replicated record cache, the tiered mode Redis (its
// records also written behind to PostgreSQL with their effects, and read
// there when Redis lost them).
//
// The package knows nothing of the counter types: a record is generic over
// the result it holds (Outcome), and a fingerprint over the op (the caller
// appends an op's fields to the hashed bytes).
package idem
