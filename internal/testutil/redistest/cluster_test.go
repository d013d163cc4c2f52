package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestNewCluster(t *testing.T) {
	start := time.Now()
	c := NewCluster(t)
	t.Logf("cluster %s ready in %v", c.URL(), time.Since(start))
	opt, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatalf("ParseClusterURL(%q): %v", c.URL(), err)
	}
	if len(opt.Addrs) != len(c.Addrs()) {
		t.Fatalf("URL names %v, Addrs = %v", opt.Addrs, c.Addrs())
	}
	ctx := context.Background()
	cl := redis.NewClusterClient(opt)
	defer cl.Close()

	// Keys in many slots: each must be stored on the master that owns its
	// slot, and the keys must cover every master.
	owners := map[string]int{}
	for i := range 30 {
		key := fmt.Sprintf("counter:{k%d}", i)
		if err := cl.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := cl.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", key, err)
		}
		addr := m.Options().Addr
		// Ask that master directly, without redirection.
		direct := redis.NewClient(&redis.Options{Addr: addr})
		got, err := direct.Get(ctx, key).Int()
		direct.Close()
		if err != nil || got != i {
			t.Fatalf("GET %s on its master %s = %d, %v", key, addr, got, err)
		}
		owners[addr]++
	}
	if len(owners) != len(c.Addrs()) {
		t.Fatalf("30 keys landed on %d masters (%v), want %d", len(owners), owners, len(c.Addrs()))
	}

	// A plain client on a node that does not own the key gets MOVED; the
	// cluster client follows it from any seed.
	key := "counter:{k0}"
	m, _ := cl.MasterForKey(ctx, key)
	for _, addr := range c.Addrs() {
		if addr == m.Options().Addr {
			continue
		}
		plain := redis.NewClient(&redis.Options{Addr: addr})
		err := plain.Get(ctx, key).Err()
		plain.Close()
		if err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
			t.Fatalf("GET %s on non-owner %s = %v, want MOVED", key, addr, err)
		}
		one := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
		got, err := one.Get(ctx, key).Int()
		one.Close()
		if err != nil || got != 0 {
			t.Fatalf("cluster client seeded with %s: GET %s = %d, %v", addr, key, got, err)
		}
	}

	c.FlushAll(t)
	err = cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if n, err := m.DBSize(ctx).Result(); err != nil || n != 0 {
			return fmt.Errorf("%s holds %d keys after FlushAll (%v)", m.Options().Addr, n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
