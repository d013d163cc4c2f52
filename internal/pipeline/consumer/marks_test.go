package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// TestMarkerCountersStillDeduplicate: the embedded engine keeps markers as
// dedupe marks, not counters; an event whose marker is a counter (written
// by a version that kept them so, in the same data directory) is still
// skipped, and an event applied now gets a mark and no counter.
func TestMarkerCountersStillDeduplicate(t *testing.T) {
	a, e := newApplier(t, 1000)
	ctx := context.Background()
	old := contract.Op{Type: contract.OpSet, ID: MarkerID("a"), Value: 1, CheckVersion: true, TTL: time.Hour}
	if _, err := e.Apply(ctx, old, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := []stream.Record{
		{Offset: 0, Value: []byte(`{"id":"a","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
		{Offset: 1, Value: []byte(`{"id":"b","type":"view","ts":1,"post":"p1","user":"u","country":"de"}`)},
	}
	for range 2 {
		if _, err := a.Apply(ctx, "test", recs); err != nil {
			t.Fatal(err)
		}
	}
	checkViews(t, e, map[string]int64{"p1": 1})
	if !e.Marked(MarkerID("b")) {
		t.Fatal("the applied event has no dedupe mark")
	}
	if _, _, exists := e.TTL(MarkerID("b")); exists {
		t.Fatal("the applied event's marker is a counter")
	}
}
