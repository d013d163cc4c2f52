package tiered

import "github.com/counterd/counterd/internal/idem"

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
