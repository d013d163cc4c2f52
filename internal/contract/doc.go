// Package contract is what every backend and front end shares: the
// operations (Op) and their answers (Result, View, Aggregate), the
// sentinel errors every backend wraps, the validation limits, and the
// Backend interface with its Capabilities and Stats. The embedded engine
// (internal/engine), the cluster node and the tiered store implement
// Backend; the front ends serve it.
package contract
