package node

// resetBackoff makes the pooled connection to node reconnect at once. After
// a peer died, gRPC fails calls to it fast until its reconnect backoff
// (1 s, growing) expires, even once the peer is back: a rejoined node
// would wait that long for its handoff, and read views and forwarded
// writes with it. Safe for concurrent use.
func (p *peers) resetBackoff(node string) {
	p.mu.Lock()
	c := p.conns[p.meta[node].GRPC]
	p.mu.Unlock()
	if c != nil {
		c.ResetConnectBackoff()
	}
}
