package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/counterd/counterd/internal/shed"
)

// PeerService is the gRPC service of peer traffic: a server that requires
// peer certificates (--peer-ca) checks the calls to it.
const PeerService = serviceName

// Meta is what a node gossips about itself: the actual bound addresses of
// its front ends and of its gRPC peer service.
type Meta struct {
	HTTP string `json:"http"`
	RESP string `json:"resp,omitempty"`
	GRPC string `json:"grpc"`
	// Caps are the placement features the member supports (capHashTags);
	// a node of a version before them sends none.
	Caps []string `json:"caps,omitempty"`
}

// capHashTags is the capability of placing ids by their Redis hash tag
// (ring.TagHash). The ring places by tag only while every member on it
// has it (refresh).
const capHashTags = "hashtags"

func (m Meta) has(c string) bool { return slices.Contains(m.Caps, c) }

func parseMeta(b []byte) Meta {
	var m Meta
	_ = json.Unmarshal(b, &m) // a member without valid meta is unreachable, not fatal
	return m
}

// peers holds the members' addresses and one pooled gRPC connection per
// peer address. Safe for concurrent use.
type peers struct {
	tls  *tls.Config       // Config.PeerTLS: nil dials in plaintext
	opts []grpc.DialOption // Config.PeerDialOptions

	mu    sync.Mutex                  // guards meta, conns, closed
	meta  map[string]Meta             // by node id
	conns map[string]*grpc.ClientConn // by gRPC address
	// retiring holds connections resetBackoff replaced, until closed.
	retiring map[*grpc.ClientConn]struct{}
	closed   bool
}

func newPeers(tlsc *tls.Config, opts ...grpc.DialOption) *peers {
	return &peers{tls: tlsc, opts: opts, meta: map[string]Meta{}, conns: map[string]*grpc.ClientConn{}, retiring: map[*grpc.ClientConn]struct{}{}}
}

func (p *peers) set(id string, m Meta) {
	p.mu.Lock()
	p.meta[id] = m
	p.mu.Unlock()
}

func (p *peers) get(id string) Meta {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.meta[id]
}

var errNoAddress = errors.New("cluster: no gRPC address known for node")

// conn returns the pooled connection to node (dialled lazily; gRPC
// reconnects by itself).
func (p *peers) conn(node string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("cluster: node closed")
	}
	addr := p.meta[node].GRPC
	if addr == "" {
		return nil, errNoAddress
	}
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		creds = credentials.NewTLS(p.tls)
	}
	c, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, p.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cluster: dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for a, c := range p.conns {
		_ = c.Close()
		delete(p.conns, a)
	}
	for c := range p.retiring {
		_ = c.Close()
		delete(p.retiring, c)
	}
}

// call invokes method on node. Transport failures become *UnavailableError;
// a call without a deadline gets cfg.RPCTimeout.
func (n *Node) call(ctx context.Context, node, method string, req, resp any) error {
	if err := n.retired(); err != nil {
		return err // forgotten: its state is stale and peers refuse it (forget.go)
	}
	conn, err := n.peers.conn(node)
	if err != nil {
		return &UnavailableError{Node: node, Op: method, Err: err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.RPCTimeout)
		defer cancel()
	}
	// Waiting for a peer is I/O: the request's admission slot goes to
	// the next request meanwhile (shed.IOWait).
	defer shed.IOWait(ctx).Resume()
	if err := invoke(ctx, conn, method, req, resp); err != nil {
		return &UnavailableError{Node: node, Op: method, Err: err}
	}
	return nil
}

// header is the request header this node sends.
func (n *Node) header(hop bool) header {
	return header{From: n.self, RingVersion: n.ring.Version(), Hop: hop}
}
