// Package records names the backends' store of small named records:
// ordered lists of opaque values, one list per space, that front ends keep
// through the backend without the backend knowing what they hold (the
// rate-limit policies of the tiered mode, space "ratelimit/policy", kept
// in PostgreSQL and shared by every node).
package records

import "context"

// Record is one named record: Value is opaque to the store.
type Record struct {
	Name  string
	Value []byte
}

// Store keeps ordered lists of named records. Implementations are safe
// for concurrent use.
type Store interface {
	// Records returns space's records in order.
	Records(ctx context.Context, space string) ([]Record, error)
	// PutRecords adds or replaces recs atomically: a new name goes to
	// the end of the order (in recs' order), a replaced one keeps its
	// place.
	PutRecords(ctx context.Context, space string, recs []Record) error
	// DeleteRecord removes one record and reports whether it existed.
	DeleteRecord(ctx context.Context, space, name string) (bool, error)
	// ReplaceRecords replaces every record of space atomically.
	ReplaceRecords(ctx context.Context, space string, recs []Record) error
}
