package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
