package redistest

import (
	"context"
	"fmt"
	"slices"
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

func TestClusterReplicaFailover(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	opt, _ := redis.ParseClusterURL(c.URL())
	cl := redis.NewClusterClient(opt)
	defer cl.Close()
	const key = "counter:{f}"
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m, _ := cl.MasterForKey(ctx, key)
	old := m.Options().Addr
	start := time.Now()
	rep := c.AddReplica(t, old)
	t.Logf("replica %s of %s in sync in %v", rep, old, time.Since(start))
	start = time.Now()
	c.Failover(t, rep)
	t.Logf("failover in %v", time.Since(start))
	if !slices.Contains(c.Addrs(), rep) || slices.Contains(c.Addrs(), old) {
		t.Fatalf("Addrs after failover = %v (replica %s, old master %s)", c.Addrs(), rep, old)
	}
	direct := redis.NewClient(&redis.Options{Addr: rep})
	defer direct.Close()
	if v, err := direct.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("GET on the new master = %q, %v", v, err)
	}
	if v, err := cl.Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("GET through the cluster client after failover = %q, %v", v, err)
	}
}

// TestNewClusterExternal: with COUNTERD_TEST_REDIS_CLUSTER set, NewCluster
// uses that cluster (here a private one) and flushes it.
func TestNewClusterExternal(t *testing.T) {
	own := NewCluster(t)
	ctx := context.Background()
	opt, _ := redis.ParseClusterURL(own.URL())
	cl := redis.NewClusterClient(opt)
	defer cl.Close()
	if err := cl.Set(ctx, "counter:{left}", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRedisCluster, own.URL())
	ext := NewCluster(t)
	if !ext.External() || ext.URL() != own.URL() {
		t.Fatalf("external cluster = %s (external %v), want %s", ext.URL(), ext.External(), own.URL())
	}
	got, want := ext.Addrs(), own.Addrs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("external masters %v, want %v", got, want)
	}
	if n, err := cl.Exists(ctx, "counter:{left}").Result(); err != nil || n != 0 {
		t.Fatalf("key survived NewCluster on the external cluster: %d, %v", n, err)
	}
}
