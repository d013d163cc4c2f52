package main

import (
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pauseProxy forwards TCP connections to a target until paused: then it
// keeps every connection open and forwards nothing either way (bytes are
// read and held), and connections made meanwhile reach the target but
// carry nothing, as over a link whose packets are dropped. Resumed, it
// forwards what it held and goes on.
type pauseProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	conns  []net.Conn
	closed bool
}

func newPauseProxy(t *testing.T, target string) *pauseProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pauseProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	go serveEach(ln, p.serve)
	return p
}

func (p *pauseProxy) addr() string { return p.ln.Addr().String() }

func (p *pauseProxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	go p.pipe(u, c)
	p.pipe(c, u)
}

// pipe copies from src to dst, holding each read while paused.
func (p *pauseProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.paused && !p.closed {
			p.cond.Wait()
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pauseProxy) setPaused(on bool) {
	p.mu.Lock()
	p.paused = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *pauseProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cond.Broadcast()
}

// TestRegionsTermWhileCut: a region node stopped (SIGTERM) while its links
// to the other region are cut exits cleanly within its shutdown timeout
// plus a few seconds. The cut keeps the connections open and carries
// nothing, and a peer's connection made during the cut reaches the node
// without ever finishing its handshake: gRPC's Stop waits up to two
// minutes for such a connection, so the node's shutdown must not wait for
// Stop unboundedly (a CI run of TestRegionsCutAndHeal saw a node hang after
// "shutting down").
func TestRegionsTermWhileCut(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two counterd processes")
	}
	const interval, shutdownTimeout = 200 * time.Millisecond, 2 * time.Second
	host, ports, command := loopback(t, 0)
	a1 := newNode(t, "a1", host, ports, command)
	host, ports, command = loopback(t, 1)
	c1 := newNode(t, "c1", host, ports, command)
	toA, toC := newPauseProxy(t, a1.grpc), newPauseProxy(t, c1.grpc)
	a1.extra = []string{"--region", "a", "--peer-regions", "c=" + toC.addr(), "--region-interval", interval.String(), "--shutdown-timeout", shutdownTimeout.String()}
	c1.extra = []string{"--region", "c", "--peer-regions", "a=" + toA.addr(), "--region-interval", interval.String(), "--shutdown-timeout", shutdownTimeout.String()}
	a1.start(t)
	c1.start(t)
	for _, n := range []*cnode{a1, c1} {
		if code, _, _, err := post(n.url+"/counters/views/increment", "", `{"delta":2}`); err != nil || code != 200 {
			t.Fatalf("%s: increment: %d %v", n.id, code, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for getGlobal(t, a1.url, "views").Value != 4 || getGlobal(t, c1.url, "views").Value != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("links never carried the writes: a1 %+v, c1 %+v", getGlobal(t, a1.url, "views"), getGlobal(t, c1.url, "views"))
		}
		time.Sleep(interval / 2)
	}

	toA.setPaused(true)
	toC.setPaused(true)
	for _, n := range []*cnode{a1, c1} {
		if code, _, _, err := post(n.url+"/counters/views/increment", "", `{"delta":1}`); err != nil || code != 200 {
			t.Fatalf("%s: increment during the cut: %d %v", n.id, code, err)
		}
	}
	// A peer reconnecting during the cut: its connection reaches c1, its
	// HTTP/2 preface does not.
	stuck, err := net.Dial("tcp", toC.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := stuck.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * interval) // pushes in flight and failing

	bound := shutdownTimeout + 5*time.Second
	for _, n := range []*cnode{c1, a1} {
		start := time.Now()
		n.p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-n.p.done:
			if err != nil {
				t.Fatalf("%s exited with %v after SIGTERM", n.id, err)
			}
		case <-time.After(bound):
			t.Fatalf("%s did not exit within %v of SIGTERM while its links were cut\n%s", n.id, bound, n.logs.tail(20))
		}
		n.p = nil
		t.Logf("%s exited %v after SIGTERM", n.id, time.Since(start).Round(time.Millisecond))
	}
}
