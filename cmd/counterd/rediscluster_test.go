package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// TestTieredOnRedisCluster runs two counterd processes in tiered mode on
// one 3-master Redis Cluster (one named by the cluster URL, one by a seed
// node with cluster=true) and one PostgreSQL: increments through either
// node add up, keys spread over every master, PFCOUNT/PFMERGE of counters
// on different masters work over RESP, and PostgreSQL holds every value
// after SIGTERM.
func TestTieredOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	cl := redistest.NewCluster(t)
	dsn := pgtest.StartServer(t).DSN(t)
	respAddr := "127.0.0.1:" + freePort(t)
	p1 := start(t, t.TempDir(), "--redis", cl.URL(), "--postgres", dsn, "--resp", respAddr)
	p2 := start(t, t.TempDir(), "--redis", "redis://"+cl.Addrs()[1]+"?cluster=true", "--postgres", dsn)

	const ids = 30
	for i := range ids {
		for j, p := range []*proc{p1, p2} {
			url := fmt.Sprintf("%s/counters/views:%d/increment", p.addr, i)
			if code, m, _, err := post(url, "", fmt.Sprintf(`{"delta": %d}`, j+1)); err != nil || code != 200 {
				t.Fatalf("increment views:%d on node %d: %d %v %v", i, j+1, code, m, err)
			}
		}
	}
	for i := range ids {
		if v := getValue(t, p2.addr, fmt.Sprintf("views:%d", i)); v != 3 {
			t.Fatalf("views:%d = %d, want 3", i, v)
		}
	}
	opt, err := redis.ParseClusterURL(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(opt)
	defer cc.Close()
	ctx := context.Background()
	err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		ks, err := m.Keys(ctx, "counter:{views:*").Result()
		if err == nil && len(ks) == 0 {
			err = fmt.Errorf("master %s holds no counter keys", m.Options().Addr)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	// The two sketches must live on different masters for PFCOUNT and
	// PFMERGE to cross slots.
	ma, _ := cc.MasterForKey(ctx, "counter:{uv:a}")
	mb, _ := cc.MasterForKey(ctx, "counter:{uv:b}")
	if ma == nil || mb == nil || ma.Options().Addr == mb.Options().Addr {
		t.Fatal("uv:a and uv:b share a master: pick other ids")
	}
	for _, c := range [][]string{{"PFADD", "uv:a", "x", "y"}, {"PFADD", "uv:b", "y", "z"}} {
		if got := respCmd(t, conn, rd, c...); got != ":1" {
			t.Fatalf("%v = %q", c, got)
		}
	}
	if got := respCmd(t, conn, rd, "PFCOUNT", "uv:a", "uv:b"); got != ":3" {
		t.Fatalf("PFCOUNT uv:a uv:b = %q, want :3", got)
	}
	if got := respCmd(t, conn, rd, "PFMERGE", "uv:all", "uv:a", "uv:b"); got != "+OK" {
		t.Fatalf("PFMERGE = %q", got)
	}
	if got := respCmd(t, conn, rd, "PFCOUNT", "uv:all"); got != ":3" {
		t.Fatalf("PFCOUNT uv:all = %q, want :3", got)
	}
	if got := respCmd(t, conn, rd, "INCRBY", "views:0", "10"); got != ":13" {
		t.Fatalf("INCRBY views:0 = %q", got)
	}

	p1.term(t)
	p2.term(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var sum int64
	if err := pool.QueryRow(ctx, `SELECT COALESCE(sum(value), 0)::bigint FROM counters WHERE counter_id LIKE 'views:%'`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 3*ids+10 {
		t.Fatalf("PostgreSQL sum of views:* = %d, want %d", sum, 3*ids+10)
	}
}
