package region

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// openTest opens a replicator of region name (an in-memory engine of its
// own) with peers, not started.
func openTest(t *testing.T, name string, peers []Peer, callTimeout time.Duration) *Replicator {
	t.Helper()
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	ecfg.NodeID = name
	local, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	r, err := Open(Config{Name: name, Peers: peers, Local: local, Dir: t.TempDir(), Interval: 50 * time.Millisecond, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// serveTest serves r's region service on a loopback port.
func serveTest(t *testing.T, r *Replicator) (*grpc.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	r.Register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return gs, ln.Addr().String()
}

// stuckCalls makes every incoming call of method block until release is
// closed, whatever its context says (a call stuck on a slow disk or a
// lock), or, with honourCtx, until its context is done. entered receives
// each call's context.
func stuckCalls(t *testing.T, method string, honourCtx bool) (entered chan context.Context, release func()) {
	t.Helper()
	entered = make(chan context.Context, 16)
	rel := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	testHookServe = func(ctx context.Context, m string) {
		if m != method {
			return
		}
		entered <- ctx
		if honourCtx {
			select {
			case <-ctx.Done():
			case <-rel:
			}
			return
		}
		<-rel
	}
	t.Cleanup(func() { release(); testHookServe = nil })
	return entered, release
}

// within fails t unless fn returns within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestStopServingCancelsIncomingCalls: a push from a peer in progress when
// the node stops (its handler waiting, as on a slow disk) is cancelled by
// StopServing, so the gRPC server's graceful stop does not wait for it;
// the sender gets Unavailable (and ships the batch again later), and every
// later call is refused the same way.
func TestStopServingCancelsIncomingCalls(t *testing.T) {
	entered, _ := stuckCalls(t, "Push", true)
	b := openTest(t, "b", []Peer{{Name: "a", Addr: "127.0.0.1:1"}}, 0)
	gs, addr := serveTest(t, b)
	a := openTest(t, "a", []Peer{{Name: "b", Addr: addr}}, 0)
	ctx := context.Background()
	if _, err := a.Wrap(engine.Local(a.local)).Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "views", Delta: 3}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	pushed := make(chan error, 1)
	go func() {
		_, err := a.pushOnce(ctx, a.peers["b"].dests[0])
		pushed <- err
	}()
	var hctx context.Context
	select {
	case hctx = <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the push never reached b")
	}
	b.StopServing()
	select {
	case <-hctx.Done():
	case <-time.After(time.Second):
		t.Fatal("StopServing did not cancel the push in progress")
	}
	if err := <-pushed; status.Code(err) != codes.Unavailable {
		t.Fatalf("push cancelled by StopServing: %v, want Unavailable", err)
	}
	if n, _ := a.t.lag(a.peers["b"].dests[0].key); n != 1 {
		t.Fatalf("a's pending ids for b after the cancelled push: %d, want 1 (not acknowledged)", n)
	}
	src := &grpcSource{conn: a.peers["b"].dests[0].conn, name: "b", timeout: 5 * time.Second}
	if _, err := src.Manifest(ctx); !containsCode(err, codes.Unavailable) {
		t.Fatalf("manifest after StopServing: %v, want Unavailable", err)
	}
	within(t, 2*time.Second, "GracefulStop", gs.GracefulStop)
	within(t, 2*time.Second, "b.Close", func() { b.Close() })
}

// TestCloseBoundedWithStuckCall: a call that ignores its cancellation
// (stuck on a lock) holds Close at most closeWait; the copies are closed
// anyway.
func TestCloseBoundedWithStuckCall(t *testing.T) {
	entered, release := stuckCalls(t, "Manifest", false)
	b := openTest(t, "b", []Peer{{Name: "a", Addr: "127.0.0.1:1"}}, 0)
	_, addr := serveTest(t, b)
	a := openTest(t, "a", []Peer{{Name: "b", Addr: addr}}, 0)
	go a.SyncFrom(context.Background(), "b")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the manifest call never reached b")
	}
	start := time.Now()
	within(t, closeWait+3*time.Second, "b.Close", func() { b.Close() })
	if took := time.Since(start); took < closeWait/2 {
		t.Fatalf("Close returned after %v with a call still running (want it to wait up to %v)", took, closeWait)
	}
	release()
	if _, err := b.remote["a"].Replace(context.Background(), nil, contract.WriteOptions{}); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("copy of a after Close: %v, want ErrClosed", err)
	}
}

// TestSyncCallDeadline: a peer that takes an anti-entropy call and never
// answers fails the sync after CallTimeout instead of holding it (and the
// sync loop) for good.
func TestSyncCallDeadline(t *testing.T) {
	entered, _ := stuckCalls(t, "Manifest", true)
	b := openTest(t, "b", []Peer{{Name: "a", Addr: "127.0.0.1:1"}}, 0)
	_, addr := serveTest(t, b)
	a := openTest(t, "a", []Peer{{Name: "b", Addr: addr}}, 300*time.Millisecond)
	var err error
	start := time.Now()
	within(t, 5*time.Second, "SyncFrom", func() { err = a.SyncFrom(context.Background(), "b") })
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("SyncFrom returned after %v, before the call timeout", took)
	}
	if !containsCode(err, codes.DeadlineExceeded) {
		t.Fatalf("sync from a peer that never answers: %v, want DeadlineExceeded", err)
	}
	if len(entered) == 0 {
		t.Fatal("the manifest call never reached b")
	}
}

// containsCode reports whether a gRPC status with code c is in err's
// chain.
func containsCode(err error, c codes.Code) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if s, ok := status.FromError(err); ok && s.Code() == c {
			return true
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if containsCode(e, c) {
					return true
				}
			}
		}
	}
	return false
}

// TestCloseWithPeerThatNeverAnswers: a started replicator whose peer
// region accepts connections and never answers (a blackholed link: TCP
// connects, nothing comes back) or answers nothing to its calls closes
// within a second.
func TestCloseWithPeerThatNeverAnswers(t *testing.T) {
	entered, release := stuckCalls(t, "Push", false)
	defer release()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	b := openTest(t, "b", []Peer{{Name: "a", Addr: "127.0.0.1:1"}, {Name: "c", Addr: "127.0.0.1:1"}}, 0)
	_, addr := serveTest(t, b)
	a := openTest(t, "a", []Peer{{Name: "b", Addr: addr}, {Name: "c", Addr: ln.Addr().String()}}, 0)
	if _, err := a.Wrap(engine.Local(a.local)).Apply(context.Background(), contract.Op{Type: contract.OpAdd, ID: "views", Delta: 1}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Start(context.Background())
	select {
	case <-entered: // a's push to b is in flight, b never answers
	case <-time.After(10 * time.Second):
		t.Fatal("a's push never reached b")
	}
	within(t, time.Second, "a.Close", func() { a.Close() })
}
