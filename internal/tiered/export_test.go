package tiered

// MaxRegisters exposes maxRegisters to the tests.
var MaxRegisters = maxRegisters

// FixClaim makes every idempotency claim c until the returned func runs.
func FixClaim(c string) (restore func()) {
	old := newClaim
	newClaim = func() string { return c }
	return func() { newClaim = old }
}
