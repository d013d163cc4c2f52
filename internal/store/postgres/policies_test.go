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
		return ratelimit.NewRecordPolicies(newStore(t, Options{MaintenanceInterval: -1}))
	})
}

// The policies are opaque named records of the store
// (ratelimit.RecordPolicies, as the tiered backend keeps them). Two stores
// on one database (two nodes) see each other's changes, and a record
// edited by hand into an invalid policy fails the load with a typed
// error instead of loading half a policy set.
func TestPolicyStoreShared(t *testing.T) {
	dsn := pgtest.DSN(t)
	sa := openStore(t, dsn, Options{MaintenanceInterval: -1})
	a := ratelimit.NewRecordPolicies(sa)
	b := ratelimit.NewRecordPolicies(openStore(t, dsn, Options{MaintenanceInterval: -1}))
	ctx := ctxT(t, 30*time.Second)
	if err := a.PutPolicy(ctx, policystoretest.Policy("api", 10)); err != nil {
		t.Fatal(err)
	}
	ps, err := b.LoadPolicies(ctx)
	if err != nil || len(ps) != 1 || ps[0] != policystoretest.Policy("api", 10) {
		t.Fatalf("other node loads %+v, %v", ps, err)
	}
	// The record of "api" without match and namespace.
	if _, err := sa.Pool().Exec(ctx, `UPDATE named_records SET value = convert_to('{"name":"api","algorithm":"token_bucket","limit":10,"period":"1s"}', 'UTF8')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LoadPolicies(ctx); !errors.Is(err, ratelimit.ErrInvalidPolicy) {
		t.Fatalf("load of an invalid row: %v, want ErrInvalidPolicy", err)
	}
}
