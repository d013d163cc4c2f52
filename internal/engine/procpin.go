package engine

import _ "unsafe" // go:linkname

// procPin returns the id of the processor (P) running the calling
// goroutine and keeps the goroutine on it until procUnpin. Used only to
// pick a per-P cell (opsCounter, hot counter stripes): the id is a hint,
// correctness never depends on the goroutine staying on that P.
//
// The runtime keeps these two exported for linkname use (sync.Pool's
// pattern, used by several widely deployed modules).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
