package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/region"
)

// TestTrackedStoreRecordsEveryWrite: a cluster node of a region records
// for shipping every write its store takes as the owner, including the
// pipeline's marked writes (ApplyStored), not only Apply and ApplyBatch.
func TestTrackedStoreRecordsEveryWrite(t *testing.T) {
	ecfg := engine.DefaultConfig()
	ecfg.InMemory = true
	ecfg.NodeID = "n1"
	ecfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	cfg := Config{Region: "a", PeerRegions: "b=127.0.0.1:1"}
	st, ch := regionStore(cfg, eng)
	if ch == nil {
		t.Fatal("regionStore with --peer-regions returned no change record")
	}
	peers, err := region.ParsePeers(cfg.PeerRegions, cfg.Region)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := region.Open(region.Config{Name: "a", Node: "n1", Peers: peers, Local: eng, Changes: ch,
		Dir: t.TempDir(), Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	pending := func() int { return rep.Status().Peers[0].Pending }

	ctx := context.Background()
	wo := contract.WriteOptions{Durability: contract.Async}
	if _, err := st.Apply(ctx, contract.Op{Type: contract.OpAdd, ID: "v:apply", Delta: 1}, wo); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != 1 {
		t.Fatalf("after Apply: %d ids pending for the peer region, want 1", got)
	}
	ops := []contract.Op{{Type: contract.OpAdd, ID: "v:marked", Delta: 2}, {Type: contract.OpAdd, ID: "v:marked2", Delta: 3}}
	if _, err := st.ApplyStored(ctx, ops, wo, func([]contract.Result) ([]engine.StoredRecord, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if got := pending(); got != 3 {
		t.Fatalf("after ApplyStored of 2 ids: %d ids pending for the peer region, want 3", got)
	}
}
