package node

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/counterd/counterd/internal/contract"
)

// TestExportStateFromNonReplica: with one replica per id, a member that
// holds no replica of an id reads its state (an hll's registers) from the
// owner, byte for byte what the owner exports; a missing id is not ok;
// an invalid id is refused.
func TestExportStateFromNonReplica(t *testing.T) {
	c := &testCluster{t: t, nodes: map[string]*testNode{}, tune: func(cfg *Config) { cfg.ReplicationFactor = 1 }}
	startTestCluster(c, "n1", "n2", "n3")
	ctx := context.Background()
	n1 := c.node("n1")
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("visitors:%d", i); n1.n.Ring().Owner(cand) != "n1" {
			id = cand
		}
	}
	items := make([][]byte, 500)
	for i := range items {
		items[i] = fmt.Appendf(nil, "user-%d", i)
	}
	if _, err := n1.n.Apply(ctx, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items}, syncWO); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := n1.eng.Export(id); ok {
		t.Fatalf("n1 holds %s with one replica per id; the test needs a member without it", id)
	}
	owner := c.node(n1.n.Ring().Owner(id))
	want, ok, err := owner.eng.Export(id)
	if err != nil || !ok {
		t.Fatalf("owner export: %v %v", ok, err)
	}
	got, ok, err := n1.n.ExportState(ctx, id)
	if err != nil || !ok {
		t.Fatalf("ExportState on a non-replica: ok %v, err %v", ok, err)
	}
	if got.Kind != contract.KindHLL || got.Version != want.Version || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("ExportState = %v v%d (%d bytes), owner has %v v%d (%d bytes)", got.Kind, got.Version, len(got.Data), want.Kind, want.Version, len(want.Data))
	}
	if _, ok, err := n1.n.ExportState(ctx, "visitors:missing"); ok || err != nil {
		t.Fatalf("missing id: ok %v, err %v", ok, err)
	}
	if _, _, err := n1.n.ExportState(ctx, ""); err == nil {
		t.Fatal("an empty id was not refused")
	}
}
