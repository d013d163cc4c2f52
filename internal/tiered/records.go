package tiered

import (
	"context"

	"github.com/counterd/counterd/internal/records"
)

// The backend's named records (records.Store) live in PostgreSQL (table
// named_records), shared by every node: the rate-limit policies of the
// tiered mode (ratelimit.RecordPolicies). A PostgreSQL failure is
// contract.ErrUnavailable.

var _ records.Store = (*Backend)(nil)

// Records returns space's records in order.
func (b *Backend) Records(ctx context.Context, space string) ([]records.Record, error) {
	recs, err := b.pg.Records(ctx, space)
	return recs, unavailable(err)
}

// PutRecords adds or replaces recs in one transaction.
func (b *Backend) PutRecords(ctx context.Context, space string, recs []records.Record) error {
	return unavailable(b.pg.PutRecords(ctx, space, recs))
}

// DeleteRecord removes one record.
func (b *Backend) DeleteRecord(ctx context.Context, space, name string) (bool, error) {
	ok, err := b.pg.DeleteRecord(ctx, space, name)
	return ok, unavailable(err)
}

// ReplaceRecords replaces every record of space in one transaction.
func (b *Backend) ReplaceRecords(ctx context.Context, space string, recs []records.Record) error {
	return unavailable(b.pg.ReplaceRecords(ctx, space, recs))
}
