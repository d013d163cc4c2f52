package node

import (
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// BenchmarkWireCodec: encode + decode of typical peer messages, the JSON
// codec peer RPC used before (json.Marshal/Unmarshal of the same structs)
// against protobuf with wire.go's conversions. bytes/msg is the message
// size. BENCHMARKS.md quotes it.
func BenchmarkWireCodec(b *testing.B) {
	hdr := header{From: "node-1", RingVersion: 42, Hop: true}
	add := &applyRequest{header: hdr, Durability: contract.Sync, IdemKey: "7f3c2a9e-4b1d-4c8e-9a51-0d2e6f8b1c37",
		Ops: []contract.Op{{Type: contract.OpAdd, ID: "tenant-a:page:/pricing:views", Delta: 1}}}
	batch := &applyRequest{header: hdr, Batch: true}
	for i := 0; i < 10; i++ {
		batch.Ops = append(batch.Ops, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("tenant-a:page:%d:views", i), Delta: int64(i + 1)})
	}
	h, err := counter.NewHLL(14)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 50000; i++ {
		h.Add([]byte(fmt.Sprint("member-", i)))
	}
	sketch, err := h.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	hll := &replicateRequest{header: hdr, Sync: true,
		States: []State{{ID: "tenant-a:visitors", Kind: contract.KindHLL, Version: 9, UpdatedAt: 1764067200000000000, Data: sketch}}}

	for _, c := range []struct {
		name  string
		req   any
		json  func([]byte) error
		proto func([]byte) error
	}{
		{"apply-add", add, decodeApplyJSON, decodeApplyProto},
		{"apply-batch10", batch, decodeApplyJSON, decodeApplyProto},
		{"replicate-hll", hll,
			func(buf []byte) error { var r replicateRequest; return json.Unmarshal(buf, &r) },
			func(buf []byte) error {
				var m pb.ReplicateRequest
				if err := proto.Unmarshal(buf, &m); err != nil {
					return err
				}
				var d decoder
				_ = d.replicateRequest(&m)
				return d.err
			}},
	} {
		b.Run(c.name+"/json", func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				buf, err := json.Marshal(c.req)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.json(buf); err != nil {
					b.Fatal(err)
				}
				size = len(buf)
			}
			b.ReportMetric(float64(size), "bytes/msg")
		})
		b.Run(c.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				m, _, err := encodeRequest(c.req)
				if err != nil {
					b.Fatal(err)
				}
				buf, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.proto(buf); err != nil {
					b.Fatal(err)
				}
				size = len(buf)
			}
			b.ReportMetric(float64(size), "bytes/msg")
		})
	}
}

// decodeApplyJSON and decodeApplyProto decode an apply request as the
// JSON codec did and as the protobuf wire does (into the node's struct).
func decodeApplyJSON(buf []byte) error { var r applyRequest; return json.Unmarshal(buf, &r) }

func decodeApplyProto(buf []byte) error {
	var m pb.ApplyRequest
	if err := proto.Unmarshal(buf, &m); err != nil {
		return err
	}
	var d decoder
	_ = d.applyRequest(&m)
	return d.err
}
