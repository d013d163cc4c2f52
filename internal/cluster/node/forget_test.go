package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// TestForget: bad forgets are refused and change nothing; a forced forget
// of a live member takes it off every ring and it stops serving; a dead
// member counts toward the majority until it is forgotten.
func TestForget(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	n1, n3 := c.node("n1").n, c.node("n3").n
	for _, tc := range []struct {
		id   string
		want error
	}{{"n1", ErrForgetSelf}, {"n9", ErrForgetUnknown}, {"n3", ErrForgetAlive}} {
		if err := n1.Forget(tc.id, false); !errors.Is(err, tc.want) || !errors.Is(err, contract.ErrInvalidArgument) {
			t.Fatalf("Forget(%s) = %v, want %v", tc.id, err, tc.want)
		}
	}
	c.waitRing("n1", "n2", "n3")

	if err := n1.Forget("n3", true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "n1 and n2 drop n3", func() bool {
		return len(n1.Ring().Nodes()) == 2 && len(c.node("n2").n.Ring().Nodes()) == 2
	})
	eventually(t, 5*time.Second, "n3 learns it was forgotten", func() bool { return n3.Ready() != nil })
	if _, err := n3.Apply(ctx, add("f:1", 1), syncWO); !errors.Is(err, contract.ErrUnavailable) || !strings.Contains(err.Error(), "forgotten") {
		t.Fatalf("write on the forgotten n3: %v", err)
	}
	if _, err := n3.Get(ctx, "f:1"); !errors.Is(err, contract.ErrUnavailable) {
		t.Fatalf("read on the forgotten n3: %v", err)
	}
	if err := n1.Forget("n3", false); err != nil { // again: a no-op
		t.Fatal(err)
	}
	if st := n1.Status(); len(st.Members) != 2 || len(st.Forgotten) != 1 || st.Forgotten[0] != "n3" {
		t.Fatalf("status after forget: %+v", st)
	}

	// n2 dies: n1 alone with one dead member has no majority.
	c.kill("n2")
	c.kill("n3")
	eventually(t, 10*time.Second, "n1 sees n2 dead", func() bool { return len(n1.Ring().Nodes()) == 1 })
	if _, err := n1.Apply(ctx, add("f:1", 1), syncWO); !errors.Is(err, errMinority) {
		t.Fatalf("owner write with n2 dead: %v, want %v", err, errMinority)
	}
	if err := n1.Forget("n2", false); err != nil {
		t.Fatal(err)
	}
	if res, err := n1.Apply(ctx, add("f:1", 1), syncWO); err != nil || res.Value != 1 {
		t.Fatalf("owner write after forget: %+v %v", res, err)
	}
}
