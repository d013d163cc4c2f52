package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestGubernatorGRPCWire checks the hand-encoded GetRateLimits request
// field by field against gubernator.proto's numbering, through a fake
// server that speaks raw gRPC on loopback, and the response parser.
func TestGubernatorGRPCWire(t *testing.T) {
	got := make(chan map[protowire.Number]any, 1)
	var over atomic.Bool // read by the server goroutine
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if method != "/pb.gubernator.V1/GetRateLimits" {
			t.Errorf("method %q", method)
		}
		var req rawMessage
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		_, _, n := protowire.ConsumeTag(req)
		inner, _ := protowire.ConsumeBytes(req[n:])
		fields := map[protowire.Number]any{}
		for len(inner) > 0 {
			num, typ, n := protowire.ConsumeTag(inner)
			inner = inner[n:]
			if typ == protowire.BytesType {
				s, n := protowire.ConsumeString(inner)
				fields[num], inner = s, inner[n:]
			} else {
				v, n := protowire.ConsumeVarint(inner)
				fields[num], inner = v, inner[n:]
			}
		}
		got <- fields
		// GetRateLimitsResp{responses: [RateLimitResp{status, limit=2, remaining=3}]}
		var r []byte
		r = protowire.AppendTag(r, 1, protowire.VarintType)
		if over.Load() {
			r = protowire.AppendVarint(r, 1)
		} else {
			r = protowire.AppendVarint(r, 0)
		}
		r = protowire.AppendTag(r, 3, protowire.VarintType)
		r = protowire.AppendVarint(r, 41)
		resp := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), r)
		return stream.SendMsg(rawMessage(resp))
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	newChecker, cleanup, err := dial("gubernator-grpc", ln.Addr().String(), 1, 1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	check := newChecker()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := check(ctx, "bench:7")
	if err != nil || !ok {
		t.Fatalf("check: %v %v", ok, err)
	}
	f := <-got
	want := map[protowire.Number]any{1: "bench", 2: "bench:7", 3: uint64(1), 4: uint64(1000), 5: uint64(60000), 7: uint64(1)}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("field %d = %v, want %v", k, f[k], v)
		}
	}
	over.Store(true)
	if ok, err := check(ctx, "bench:7"); err != nil || ok {
		t.Errorf("OVER_LIMIT answer: %v %v", ok, err)
	}
	<-got
}
