package tiered

// MaxRegisters exposes maxRegisters to the tests.
var MaxRegisters = maxRegisters
