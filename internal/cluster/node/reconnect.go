package node

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// retireGrace is how long a replaced connection stays open for the calls
// already running on it.
const retireGrace = 5 * time.Second

// resetBackoff makes the pooled connection to node reconnect at once. After
// a peer died, gRPC fails calls to it fast until its reconnect backoff
// (1 s, growing) expires, even once the peer is back: a rejoined node
// would wait that long for its handoff, and read views and forwarded
// writes with it. A connection that is not ready is replaced by a new one
// (dialled on the next call); the old one is closed after retireGrace.
// gRPC's own ClientConn.ResetConnectBackoff is not used: it ranges over
// the connection's sub-connection map outside its lock, a data race with
// a sub-connection being created. Safe for concurrent use.
func (p *peers) resetBackoff(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr := p.meta[node].GRPC
	c := p.conns[addr]
	if c == nil || c.GetState() == connectivity.Ready {
		return
	}
	delete(p.conns, addr)
	p.retiring[c] = struct{}{}
	time.AfterFunc(retireGrace, func() { p.retire(c) })
}

// retire closes c, a connection resetBackoff replaced.
func (p *peers) retire(c *grpc.ClientConn) {
	p.mu.Lock()
	_, ok := p.retiring[c]
	delete(p.retiring, c)
	p.mu.Unlock()
	if ok {
		_ = c.Close()
	}
}
