package node

// KeyOwner reports whether this node owns key on the current ring and, when
// it does not, the owner's HTTP address. Rate-limit checks use it
// (ratelimit.RouterConfig.Owner) so that each key is decided on one node.
// An owner whose address is not known yet is treated as self: the check is
// decided locally, which is approximate (docs/ratelimit.md, "Cluster mode").
func (n *Node) KeyOwner(key string) (self bool, httpAddr string) {
	id := n.ring.Snapshot().Owner(key)
	if id == "" || id == n.self {
		return true, ""
	}
	addr := n.peers.get(id).HTTP
	return addr == "", addr
}

// RingVersion is the version of the current ring snapshot; the server sets
// it as the Counterd-Ring-Version header on every HTTP answer so that
// routing clients notice membership changes.
func (n *Node) RingVersion() uint64 { return n.ring.Snapshot().Version() }
