package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/policystoretest"
	"github.com/counterd/counterd/internal/testutil/pgtest"
)

func TestPolicyStore(t *testing.T) {
	policystoretest.Run(t, func(t *testing.T) ratelimit.PolicyStore {
		return newStore(t, Options{MaintenanceInterval: -1}).Policies()
	})
}

// Two stores on one database (two nodes) see each other's changes, and a
// row edited by hand into an invalid policy fails the load with a typed
// error instead of loading half a policy set.
func TestPolicyStoreShared(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := openStore(t, dsn, Options{MaintenanceInterval: -1}).Policies()
	b := openStore(t, dsn, Options{MaintenanceInterval: -1}).Policies()
	ctx := ctxT(t, 30*time.Second)
	if err := a.PutPolicy(ctx, policystoretest.Policy("api", 10)); err != nil {
		t.Fatal(err)
	}
	ps, err := b.LoadPolicies(ctx)
	if err != nil || len(ps) != 1 || ps[0] != policystoretest.Policy("api", 10) {
		t.Fatalf("other node loads %+v, %v", ps, err)
	}
	if _, err := a.s.Pool().Exec(ctx, `UPDATE ratelimit_policies SET match = '', namespace = ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LoadPolicies(ctx); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
		t.Fatalf("load of an invalid row: %v, want ErrInvalidPolicy", err)
	}
}
