package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// blackhole is a TCP proxy in front of a node's gRPC listener that can
// start swallowing traffic: after hang, every connection (open or new) is
// accepted and read, and nothing reaches either side, like a peer that
// accepts connections and never answers.
type blackhole struct {
	lis    net.Listener
	target string
	hung   atomic.Bool
	mu     sync.Mutex // guards conns
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newBlackhole(t testing.TB, target string) *blackhole {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{lis: lis, target: target}
	b.wg.Go(b.accept)
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.lis.Addr().String() }

func (b *blackhole) hang() { b.hung.Store(true) }

func (b *blackhole) track(c net.Conn) {
	b.mu.Lock()
	b.conns = append(b.conns, c)
	b.mu.Unlock()
}

func (b *blackhole) accept() {
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		b.track(c)
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		b.track(up)
		b.wg.Go(func() { b.pipe(up, c) })
		b.wg.Go(func() { b.pipe(c, up) })
	}
}

// pipe copies src to dst until either closes, dropping what it reads once
// the proxy hangs.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 && !b.hung.Load() {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) close() {
	_ = b.lis.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestPeerBlackholeBoundedWaits: a peer that accepts connections and never
// answers (its gossip still alive, so it stays on the ring) holds no
// request longer than the request bound (Config.RequestTimeout, 5 s by
// default, for a context without deadline): a sync write forwarded to it
// answers ErrUnavailable; a sync write on another owner, whose fence and
// replication ask the hung replica, succeeds; a read of one of its ids
// falls back to a replica; an aggregate counts its ids on their next
// replicas.
func TestPeerBlackholeBoundedWaits(t *testing.T) {
	var holes sync.Map // node id -> *blackhole
	c := &testCluster{t: t, nodes: map[string]*testNode{}, advertise: func(id, addr string) string {
		if id != "n3" {
			return addr
		}
		b := newBlackhole(t, addr)
		holes.Store(id, b)
		return b.addr()
	}}
	startTestCluster(c, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1").n
	var sum int64
	for i := 0; i < 30; i++ {
		if _, err := n1.Apply(ctx, add(fmt.Sprintf("bh:%02d", i), int64(i)), syncWO); err != nil {
			t.Fatal(err)
		}
		sum += int64(i)
	}
	eventually(t, 10*time.Second, "a first read view", func() bool {
		_, err := n1.Aggregate(ctx, "bh:")
		return err == nil
	})
	idOwnedBy := func(owner, prefix string) string {
		for i := 0; ; i++ {
			if id := fmt.Sprintf("%s%d", prefix, i); n1.Ring().Owner(id) == owner {
				return id
			}
		}
	}
	onN1 := idOwnedBy("n1", "bh:fresh:")
	var n3id string
	for i := 0; n3id == ""; i++ {
		if id := fmt.Sprintf("bh:%02d", i); n1.Ring().Owner(id) == "n3" {
			n3id = id
		}
	}
	b, _ := holes.Load("n3")
	b.(*blackhole).hang()

	const bound = DefaultRequestTimeout + 2*time.Second // slack for a loaded -race run
	timed := func(what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- f() }()
		select {
		case err := <-done:
			t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
			return err
		case <-time.After(bound):
			t.Fatalf("%s: still waiting after %v with a peer that never answers", what, bound)
			return nil
		}
	}
	err := timed("sync write forwarded to the hung owner", func() error {
		_, err := n1.Apply(ctx, add(idOwnedBy("n3", "bh:w:"), 1), syncWO)
		return err
	})
	if !errors.Is(err, contract.ErrUnavailable) {
		t.Errorf("sync write on the hung owner: %v, want ErrUnavailable", err)
	}
	if err := timed("sync write with the hung node as replica", func() error {
		_, err := n1.Apply(ctx, add(onN1, 5), syncWO)
		return err
	}); err != nil {
		t.Errorf("sync write on n1 (quorum n1+n2): %v", err)
	}
	if err := timed("read of an id of the hung owner", func() error {
		v, err := n1.Get(ctx, n3id)
		if err == nil && !v.Exists {
			err = fmt.Errorf("%s read as missing", n3id)
		}
		return err
	}); err != nil {
		t.Errorf("read with the owner hung: %v", err)
	}
	if err := timed("aggregate", func() error {
		a, err := n1.Aggregate(ctx, "bh:")
		if err == nil && a.Value != sum+5 {
			err = fmt.Errorf("aggregate %+v, want value %d", a, sum+5)
		}
		return err
	}); err != nil {
		t.Errorf("aggregate with a hung node: %v", err)
	}
}
