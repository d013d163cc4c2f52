package node

import (
	"github.com/counterd/counterd/internal/contract"
)

// Capabilities are the local store's, changed by what placement on a ring
// costs: batches are atomic per owner (ApplyBatch), multi-key ops need one
// owner (checkSources, PFCount), pn/sharded adds are applied where they
// arrive and pushed to the owner every PushInterval, and idempotency keys
// are checked by the node that applies.
func (n *Node) Capabilities() contract.Capabilities {
	c := n.store.Capabilities()
	c.Mode = "cluster"
	c.Limits = n.cfg.Limits
	c.Batches = contract.BatchAtomicPerOwner
	c.MultiKeyAnyOwner = false
	c.LaggingCRDTAdds = true
	c.CRDTPropagationMS = n.cfg.PushInterval.Milliseconds()
	c.GlobalIdempotencyKeys = false // checked by the node that applies (idem.go)
	return c
}
