package node

import (
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// shardedState encodes s as node name would export it.
func shardedState(t *testing.T, s *counter.Sharded) State {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return State{ID: "x", Kind: contract.KindSharded, Version: 1, Data: b}
}

// TestShardedDigestIgnoresHolder: converged replicas of a sharded counter
// encode different bytes (each names itself as the local replica) but must
// digest alike, or anti-entropy re-sends them every round.
func TestShardedDigestIgnoresHolder(t *testing.T) {
	a, b := counter.NewSharded(4), counter.NewSharded(4)
	if err := a.SetReplica("a"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetReplica("b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(1, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(2, 7); err != nil {
		t.Fatal(err)
	}
	ac, bc := a.Clone(), b.Clone()
	if _, err := a.Merge(bc); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Merge(ac); err != nil {
		t.Fatal(err)
	}
	sa, sb := shardedState(t, a), shardedState(t, b)
	if string(sa.Data) == string(sb.Data) {
		t.Fatal("the encodings are equal; the test no longer shows anything")
	}
	if digestOf(sa) != digestOf(sb) {
		t.Errorf("converged replicas digest differently: %+v, %+v", digestOf(sa), digestOf(sb))
	}
	if err := a.Add(1, 1); err != nil {
		t.Fatal(err)
	}
	if digestOf(shardedState(t, a)) == digestOf(sb) {
		t.Error("a new add did not change the digest")
	}
}
