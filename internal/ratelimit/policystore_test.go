package ratelimit_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/policystoretest"
)

func TestMemoryPolicyStore(t *testing.T) {
	policystoretest.Run(t, func(*testing.T) ratelimit.PolicyStore { return new(ratelimit.MemoryPolicyStore) })
}

// SeedPolicies adds what the store lacks and keeps what it has.
func TestSeedPolicies(t *testing.T) {
	ctx := t.Context()
	st := new(ratelimit.MemoryPolicyStore)
	changed := policystoretest.Policy("a", 100)
	if err := st.PutPolicy(ctx, changed); err != nil {
		t.Fatal(err)
	}
	file := []ratelimit.Policy{policystoretest.Policy("a", 10), policystoretest.Policy("b", 20)}
	added, kept, err := ratelimit.SeedPolicies(ctx, st, file)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(added, []string{"b"}) || !slices.Equal(kept, []string{"a"}) {
		t.Fatalf("added %v kept %v; want [b] [a]", added, kept)
	}
	ps, _ := st.LoadPolicies(ctx)
	if !slices.Equal(ps, []ratelimit.Policy{changed, file[1]}) {
		t.Fatalf("store after seeding: %+v", ps)
	}
	// Seeding again is a no-op.
	added, kept, err = ratelimit.SeedPolicies(ctx, st, file)
	if err != nil || len(added) != 0 || !slices.Equal(kept, []string{"a"}) {
		t.Fatalf("second seed: added %v kept %v err %v", added, kept, err)
	}
	if _, _, err := ratelimit.SeedPolicies(ctx, st, []ratelimit.Policy{file[0], file[0]}); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
		t.Fatalf("duplicate names: %v", err)
	}
}
