package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClusterScripts: in cluster mode a script's declared keys must have
// one owner on the ring (Redis Cluster's CROSSSLOT otherwise), and so must
// every key it calls; a script on one key runs from any node.
func TestClusterScripts(t *testing.T) {
	c := newCluster(t, 2, loopback)
	ctx := context.Background()
	keys := make([]string, 24) // two owners among them, all but surely
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	lim := redis.NewScript(`local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return c`)
	want := int64(0)
	for _, n := range c.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.resp, Protocol: 2, MaxRetries: -1})
		defer rdb.Close()
		err := rdb.Eval(ctx, "return 1", keys).Err()
		if err == nil || err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
			t.Fatalf("%s: EVAL over %d keys: %v", n.id, len(keys), err)
		}
		body := "for i, k in ipairs(ARGV) do redis.call('INCR', k) end return 1"
		args := make([]any, len(keys))
		for i, k := range keys {
			args[i] = k
		}
		err = rdb.Eval(ctx, body, []string{"k0"}, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERR Script attempted to access a non local key in a cluster node script") {
			t.Fatalf("%s: undeclared keys of other owners: %v", n.id, err)
		}
		for i := 0; i < 3; i++ {
			got, err := lim.Run(ctx, rdb, []string{"rl:cluster"}, 600).Int64()
			want++
			if err != nil || got != want {
				t.Fatalf("%s: limiter = %d (%v), want %d", n.id, got, err, want)
			}
		}
		if ttl, err := rdb.TTL(ctx, "rl:cluster").Result(); err != nil || ttl <= 0 {
			t.Fatalf("%s: TTL = %v (%v)", n.id, ttl, err)
		}
	}
}
