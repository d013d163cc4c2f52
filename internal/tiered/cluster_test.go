package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/contract"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// testPFCountMergeAcrossSlots: PFCOUNT of several counters and PFMERGE
// give the same answers whether the counters share a server or live on
// different cluster masters, before and after the Redis tier is lost.
func testPFCountMergeAcrossSlots(t *testing.T, s setup) {
	e := s.env(t, nil)
	ctx := context.Background()
	ids := []string{"visitors:a", "visitors:b", "visitors:c", "visitors:d"}
	for i, id := range ids {
		items := make([][]byte, 0, 500)
		for j := range 500 {
			items = append(items, fmt.Appendf(nil, "user%d", i*250+j)) // neighbours overlap by half
		}
		apply(t, e.b, contract.Op{Type: contract.OpPFAdd, ID: id, Items: items})
	}
	if e.cl != nil {
		masters := map[string]bool{}
		c := e.b.Redis().Client().(*redis.ClusterClient)
		for _, id := range ids {
			m, err := c.MasterForKey(ctx, redisstore.ValueKey(id))
			if err != nil {
				t.Fatal(err)
			}
			masters[m.Options().Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("the counters share one master: the test proves nothing")
		}
	}
	n, _, err := e.b.PFCount(ctx, ids...)
	if err != nil || math.Abs(float64(n)-1250) > 40 {
		t.Fatalf("PFCount = %d, %v, want about 1250", n, err)
	}
	r := apply(t, e.b, contract.Op{Type: contract.OpPFMerge, ID: "visitors:all", Sources: ids})
	if r.Value != int64(n) {
		t.Fatalf("PFMERGE estimate %d, PFCount of the sources %d", r.Value, n)
	}
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpPFMerge, ID: "visitors:all", Sources: []string{"visitors:a", "plain"}},
		contract.WriteOptions{}); err != nil {
		t.Fatal(err) // a missing source counts as empty
	}
	apply(t, e.b, add("plain", contract.KindNone, 1))
	if _, err := e.b.Apply(ctx, contract.Op{Type: contract.OpPFMerge, ID: "visitors:all", Sources: []string{"visitors:a", "plain"}},
		contract.WriteOptions{}); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("PFMERGE of a counter: %v, want ErrWrongKind", err)
	}
	if _, _, err := e.b.PFCount(ctx, "visitors:a", "plain"); !errors.Is(err, contract.ErrWrongKind) {
		t.Fatalf("PFCount of a counter: %v, want ErrWrongKind", err)
	}
	// The sketches come back from PostgreSQL on every master.
	if err := e.b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.flushRedis(t)
	if n2, _, err := e.b.PFCount(ctx, ids...); err != nil || n2 != n {
		t.Fatalf("PFCount after the Redis tier was lost = %d, %v, want %d", n2, err, n)
	}
	if v := view(t, e.b, "visitors:all"); v.Value != int64(n) {
		t.Fatalf("merged counter after reload = %d, want %d", v.Value, n)
	}
}

// counterKeys counts the counter:{...} keys on every master of the Redis
// tier.
func counterKeys(t *testing.T, e *env) int {
	t.Helper()
	ctx := context.Background()
	count := func(ctx context.Context, m *redis.Client) (int, error) {
		ks, err := m.Keys(ctx, "counter:{*").Result()
		return len(ks), err
	}
	switch c := e.b.Redis().Client().(type) {
	case *redis.ClusterClient:
		var n atomic.Int64
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			k, err := count(ctx, m)
			n.Add(int64(k))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return int(n.Load())
	case *redis.Client:
		n, err := count(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("unexpected client %T", e.b.Redis().Client())
	return 0
}
