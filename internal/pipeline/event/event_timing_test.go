package event

import (
	"fmt"
	"testing"
)

// benchBatch is n events in NDJSON, shaped like the pipeline benchmark's
// (cmd/counterd/pipeline_timing_test.go).
func benchBatch(n int) []byte {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, `{"id":"b%d","type":"impression","ts":1764064800000,"post":"p%d","user":"u%d","country":"c%d"}`+"\n", i, i%1000, i%50000, i%5)
	}
	return b
}

// BenchmarkParseBatch: the collector's part, a batch of 1000 events
// checked and split; per event.
func BenchmarkParseBatch(b *testing.B) {
	data := benchBatch(1000)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)) / 1000)
	for i := 0; i < b.N; i += 1000 {
		if _, _, err := ParseBatchRaw(data, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode: the consumer's decode of one event from the stream.
func BenchmarkDecode(b *testing.B) {
	raw := []byte(`{"id":"b123","type":"impression","ts":1764064800000,"post":"p123","user":"u123","country":"c3"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(raw, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
