package node

import (
	"context"
	"sync/atomic"

	"github.com/counterd/counterd/internal/cluster/ring"
)

// knobs let in-package tests hold a mechanism at a chosen point (a
// handoff, a read view's call) to play a race deterministically. They are
// nil outside tests.
var knobs struct {
	// beforeHandoff runs at the start of each handoff attempt of node self
	// into ring cur; it may block.
	beforeHandoff atomic.Pointer[func(self string, cur *ring.Snapshot)]
	// viewCall, when it returns an error, replaces coordinator's call for
	// node's part of a read view (a part that timed out: a non-nil
	// *UnavailableError with Node set puts node in the down set).
	viewCall atomic.Pointer[func(coordinator, node string) error]
	// beforeSetRing runs before node self installs the node set nodes
	// (from membership); it may block.
	beforeSetRing atomic.Pointer[func(self string, nodes []string)]
	// handoffPush, when it returns an error, fails node self's handoff
	// push to peer (under ctx, the handoff's) as if peer had not
	// acknowledged it.
	handoffPush atomic.Pointer[func(ctx context.Context, self, peer string) error]
	// afterFence runs in node self's owner operation after its fence (and
	// lease guard) of ring version v, before it takes the gate to check
	// that the ring is still v; it may change the ring.
	afterFence atomic.Pointer[func(self string, v uint64)]
}
