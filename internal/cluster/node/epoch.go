package node

import (
	"sync"
)

// Ownership epochs fence an old owner out. Before an owner serves its first
// operation on an id after a ring change, its takeover fence claims a new
// epoch for the id from the id's replicas (fence.go): a replica promises
// the claimant not to acknowledge an owner write of any lower epoch, and
// the claim succeeds once a write quorum (the claimant included) promised.
// Its writes then carry the epoch in the high 32 bits of the id's version
// (Store.RaiseVersion), so on every replica, in every merge (owner
// replication, handoff, anti-entropy, a later fence) they beat whatever
// the previous owner wrote, however many attempts it made.
//
// An old owner that has not seen the ring change yet (the small side of a
// partition, before gossip declares the other side dead) still applies
// writes locally, but no write quorum acknowledges them: every quorum
// intersects the claimant's, and a replica that promised a higher epoch
// answers the push as stale (replicateResponse.Stale) under the same lock
// that orders the merge against a claim. So a write it acknowledges was
// merged by a quorum before the new owner's claim reached that quorum's
// intersection with its own, whose fetch answer then carried it: nothing
// it acknowledged is lost, and nothing it did not acknowledge can replace
// what the new owner acknowledged.
//
// Promises live in memory: a replica that restarts forgets them (the
// epochs written into versions stay), see docs/cluster.md.

// epochBits is where the epoch sits in a version.
const epochBits = 32

// epochOf is the ownership epoch a version was written in.
func epochOf(version uint64) uint32 { return uint32(version >> epochBits) }

// epochFloor is the lowest version of epoch e.
func epochFloor(e uint32) uint64 { return uint64(e) << epochBits }

// promise is a replica's promise for one id: no owner write of an epoch
// below Epoch is acknowledged, and Epoch itself belongs to Node.
type promise struct {
	Epoch uint32
	Node  string
}

// promises holds this node's promises by id, and the stripes that order a
// claim and its export against the check and merge of a push. Safe for
// concurrent use.
type promises struct {
	mu    sync.Mutex // guards by
	by    map[string]promise
	locks stripes // held exclusively: claim+export, check+merge (epoch.go)
}

func (p *promises) init() { p.by = map[string]promise{} }

func (p *promises) get(id string) promise {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.by[id]
}

// claim records node's claim of epoch e for id unless a higher epoch, or
// the same epoch of another node, was promised; it returns the promise
// in force afterwards (equal to {e, node} when the claim was accepted).
// floor is the epoch of the local state's version: a claim at or below it
// is refused too (a write of that epoch exists).
func (p *promises) claim(id string, e uint32, node string, floor uint32) promise {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.by[id]
	if floor > cur.Epoch {
		cur = promise{Epoch: floor}
	}
	if e > cur.Epoch || (e == cur.Epoch && node == cur.Node) {
		cur = promise{Epoch: e, Node: node}
		p.by[id] = cur
	}
	return cur
}

// stale reports whether a state written at version and pushed by from
// comes from an owner this node has promised to fence out: its epoch is
// below the promised one and from is not the claimant (whose fenced copy
// holds everything acknowledged before its claim).
func (p *promises) stale(id string, version uint64, from string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.by[id]
	return epochOf(version) < cur.Epoch && from != cur.Node
}

// lockIDs takes the promise stripes of ids exclusively; it returns the
// unlock.
func (p *promises) lockIDs(ids []string) func() { return p.locks.lock(ids) }

// claimLocal claims an epoch for id on this node, above above and the
// epoch of its copy: the one it already holds when that is high enough
// (concurrent fences of one id, or a ring change that left it the owner,
// share it: a replica accepts its holder's claim again), else the lowest
// above every epoch promised here. It returns the epoch claimed.
func (n *Node) claimLocal(id string, above uint32) uint32 {
	unlock := n.promises.lockIDs([]string{id})
	defer unlock()
	floor := uint32(0)
	if v, ok, err := n.versionOf(id); err == nil && ok {
		floor = epochOf(v)
	}
	cur := n.promises.get(id)
	if cur.Node == n.self && cur.Epoch > max(above, floor) {
		return cur.Epoch
	}
	e := max(above, floor, cur.Epoch) + 1
	return n.promises.claim(id, e, n.self, floor).Epoch
}
