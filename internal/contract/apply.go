package contract

import (
	"fmt"
	"time"
)

// MaxItems is the default bound on the items of one PFADD, the fields of
// one HADD/HDEL and the sources of one PFMERGE (Limits.MaxItems).
const MaxItems = 10000

// BatchError is the error of a batch whose op Index failed; nothing in the
// batch was applied. It unwraps to the op's error.
type BatchError struct {
	Index int
	Err   error
}

func (b *BatchError) Error() string { return fmt.Sprintf("batch op %d: %v", b.Index, b.Err) }
func (b *BatchError) Unwrap() error { return b.Err }

// needs names the kinds op works on, for wrong-kind errors.
func (t OpType) Needs() string {
	switch t {
	case OpAdd:
		return "an additive kind (counter, float, sharded, pn or window)"
	case OpSet:
		return "kind counter or float"
	case OpPFAdd, OpPFMerge:
		return "kind hll"
	case OpHAdd, OpHDel, OpHSet:
		return "kind hash"
	}
	return "another kind"
}

// MaxTTL is the longest time to live: longer ones are refused. It is 200
// years so that Redis-protocol clients' far expiries (EXPIRE k 4000000000,
// about 127 years, which Redis accepts) are kept as given; the HTTP API
// keeps its own 100-year bound on ttl_ms.
const MaxTTL = 200 * 365 * 24 * time.Hour
