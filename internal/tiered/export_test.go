package tiered

import (
	"context"

	"github.com/counterd/counterd/internal/idem"
)

// MaxRegisters exposes maxRegisters to the tests.
var MaxRegisters = maxRegisters

// FixClaim makes every idempotency claim c until the returned func runs.
func FixClaim(c string) (restore func()) {
	old := idem.NewClaim
	idem.NewClaim = func() string { return c }
	return func() { idem.NewClaim = old }
}

// IdemLookups is how many won claims b checked in the durable tier.
func IdemLookups(b *Backend) uint64 { return b.idemLookups.Load() }

// PassMarkers sets every slot's idempotency marker to a time passed, as
// one retention after a loss: won claims no longer ask PostgreSQL.
func PassMarkers(ctx context.Context, b *Backend) error {
	p := b.rs.Client().Pipeline()
	for s := range slots {
		p.Set(ctx, markPrefix+"{"+slotTag(s)+"}", 0, 0)
	}
	_, err := p.Exec(ctx)
	return err
}
