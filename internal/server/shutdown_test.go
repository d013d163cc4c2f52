package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/emptypb"
)

// stuckService has one unary method, Call, whose handler blocks until
// release is closed, whatever its context says (a handler stuck on a lock
// or a disk).
func stuckService(entered chan<- struct{}, release <-chan struct{}) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Stuck",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			entered <- struct{}{}
			<-release
			return new(emptypb.Empty), nil
		}}},
	}
}

// TestStopGRPCBounded: the gRPC server's stop on shutdown returns within
// the shutdown timeout plus grpcStopWait when a connection never finished
// its handshake (a peer connected through a link cut right after: gRPC's
// Stop waits up to its 2-minute connection timeout for it) and when a
// call ignores its cancellation (a graceful stop waiting for it holds the
// server's lock, so Stop waits too).
func TestStopGRPCBounded(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []string{"handshake", "stuck call"} {
		t.Run(tc, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			gs := grpc.NewServer()
			gs.RegisterService(stuckService(entered, release), struct{}{})
			go gs.Serve(ln)
			switch tc {
			case "handshake":
				c, err := net.Dial("tcp", ln.Addr().String()) // and send nothing
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				time.Sleep(100 * time.Millisecond) // accepted: in its handshake
			case "stuck call":
				conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				go conn.Invoke(context.Background(), "/test.Stuck/Call", new(emptypb.Empty), new(emptypb.Empty))
				select {
				case <-entered:
				case <-time.After(10 * time.Second):
					t.Fatal("the call never reached the server")
				}
			}
			const timeout = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			done := make(chan struct{})
			go func() { stopGRPC(gs, ctx, log); close(done) }()
			bound := timeout + grpcStopWait + 2*time.Second
			select {
			case <-done:
			case <-time.After(bound):
				t.Fatalf("stopGRPC did not return within %v", bound)
			}
			if took := time.Since(start); took < timeout {
				t.Fatalf("stopGRPC returned after %v, before the shutdown timeout", took)
			}
		})
	}
}

// TestGRPCHandshakeTimeout: with grpcConnOptions, a connection that never
// sends its HTTP/2 preface is closed by the server after the handshake
// timeout, and a connection that finished its handshake is not (its
// deadline is lifted): calls on it still work after the timeout.
func TestGRPCHandshakeTimeout(t *testing.T) {
	const handshake = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	close(release) // calls return at once
	gs := grpc.NewServer(grpcConnOptions(handshake)...)
	gs.RegisterService(stuckService(entered, release), struct{}{})
	go gs.Serve(ln)
	defer gs.Stop()

	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return conn.Invoke(ctx, "/test.Stuck/Call", new(emptypb.Empty), new(emptypb.Empty))
	}
	if err := call(); err != nil {
		t.Fatalf("call: %v", err)
	}
	<-entered

	silent, err := net.Dial("tcp", ln.Addr().String()) // and send nothing
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if took := waitClosed(t, silent, 5*time.Second); took < handshake-50*time.Millisecond || took > handshake+2*time.Second {
		t.Fatalf("a connection without a preface was closed after %v, want about %v", took, handshake)
	}

	if err := call(); err != nil { // past the handshake timeout
		t.Fatalf("call after the handshake timeout: %v", err)
	}
	<-entered
}

// waitClosed reads c until the peer closes it (EOF or a reset) and
// returns how long that took; it fails the test if c is still open after
// limit.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // what the server sent before closing
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection still open after %v", limit)
		}
		return time.Since(start)
	}
}

// listenCapture is a slog.Handler that records the addr of every
// "... listening" record and the messages of warnings.
type listenCapture struct {
	mu     sync.Mutex
	addrs  map[string]string
	warns  []string
	ready  chan struct{}
	want   int      // close ready once this many listeners logged, or
	need   []string // once every one of these did
	closed bool
}

// complete reports, once, that the listeners waited for have logged
// (ready is then closed).
func (h *listenCapture) complete() bool {
	if h.closed {
		return false
	}
	if h.need == nil {
		h.closed = len(h.addrs) == h.want
		return h.closed
	}
	for _, n := range h.need {
		if _, ok := h.addrs[n]; !ok {
			return false
		}
	}
	h.closed = true
	return true
}

func (h *listenCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *listenCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *listenCapture) WithGroup(string) slog.Handler            { return h }
func (h *listenCapture) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		h.warns = append(h.warns, r.Message)
	}
	if !strings.HasSuffix(r.Message, " listening") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "addr" {
			h.addrs[strings.TrimSuffix(r.Message, " listening")] = a.Value.String()
			if h.complete() {
				close(h.ready)
			}
		}
		return true
	})
	return nil
}

// TestRunShutdownBounded runs a node with every front end and, before
// stopping it: a gRPC connection that never sends its preface (closed by
// the node after the handshake timeout, grpcConnectionTimeout), a RESP
// client that never reads its replies (the node's write to it blocks),
// and an HTTP request whose body never comes (its handler waits on it
// past the shutdown timeout). The node must stop within --shutdown-timeout
// plus grpcStopWait and a little, and close the HTTP connection it gave
// up waiting for rather than leave it open.
func TestRunShutdownBounded(t *testing.T) {
	defer func(d time.Duration) { grpcConnectionTimeout = d }(grpcConnectionTimeout)
	grpcConnectionTimeout = 300 * time.Millisecond
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.NodeID = "shutdown"
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = time.Second
	h := &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), want: 3}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runErr error
	done := make(chan struct{})
	go func() { runErr = Run(ctx, cfg, slog.New(h)); close(done) }()
	select {
	case <-h.ready:
	case <-done:
		t.Fatalf("Run: %v", runErr)
	case <-time.After(30 * time.Second):
		t.Fatal("node did not start")
	}
	h.mu.Lock()
	httpAddr, respAddr, grpcAddr := h.addrs["http"], h.addrs["resp"], h.addrs["grpc"]
	h.mu.Unlock()

	silent, err := net.Dial("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if took := waitClosed(t, silent, 5*time.Second); took > grpcConnectionTimeout+2*time.Second {
		t.Fatalf("gRPC connection without a preface closed after %v", took)
	}

	rc, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.(*net.TCPConn).SetReadBuffer(4 << 10)
	batch := []byte(strings.Repeat("*1\r\n$7\r\nCOMMAND\r\n", 64))
	for blocked := false; !blocked; {
		rc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := rc.Write(batch); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("resp write: %v", err)
			}
			blocked = true
		}
	}

	hc, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if _, err := io.WriteString(hc, "POST /counters/views/increment HTTP/1.1\r\nHost: "+httpAddr+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"delta\":"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the handler is reading the body

	start := time.Now()
	cancel()
	bound := cfg.ShutdownTimeout + grpcStopWait + 3*time.Second
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("Run did not return within %v of its cancellation", bound)
	}
	t.Logf("Run returned %v after %v", runErr, time.Since(start))
	if runErr != nil {
		t.Fatalf("Run: %v", runErr)
	}
	waitClosed(t, hc, 2*time.Second)
}

// TestGRPCKeepaliveClientPings: a client pinging as often as gRPC allows
// its clients (every 10 s), without calls in flight, keeps its connection:
// the server's policy (grpcMinPingInterval, PermitWithoutStream) does not
// answer it GOAWAY "too_many_pings" (gRPC's default policy does after the
// third ping).
func TestGRPCKeepaliveClientPings(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for three keepalive pings, 30 s")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	close(release)
	gs := grpc.NewServer(grpcConnOptions(grpcConnectionTimeout)...)
	gs.RegisterService(stuckService(entered, release), struct{}{})
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: grpcMinPingInterval, Timeout: 5 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/test.Stuck/Call", new(emptypb.Empty), new(emptypb.Empty)); err != nil {
		t.Fatalf("call: %v", err)
	}
	<-entered
	wctx, wcancel := context.WithTimeout(context.Background(), 3*grpcMinPingInterval+3*time.Second)
	defer wcancel()
	// A loaded machine may drop the first transport (a CI run saw
	// CONNECTING right after the call); what this test guards is that a
	// ready connection stays ready while the client pings.
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		conn.Connect()
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("connection not ready within 5 s of the call (%v)", conn.GetState())
		}
	}
	if conn.WaitForStateChange(wctx, connectivity.Ready) {
		t.Fatalf("connection left READY (now %v) while the client pinged every %v", conn.GetState(), grpcMinPingInterval)
	}
}
