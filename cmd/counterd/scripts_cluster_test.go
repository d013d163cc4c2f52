package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestClusterScriptsHashTag: keys sharing a hash tag have one owner (the
// ring places them by the tag), so a script over {tag}:a and {tag}:b, and
// one calling a third key of the tag, run from any node, and so does a
// RENAME between two of them. The tag is chosen so that its keys have two
// owners when whole ids are placed.
func TestClusterScriptsHashTag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	c := newCluster(t, 3, loopback)
	v := waitAlive(t, c.nodes, 30*time.Second)[0]
	if !v.HashTags {
		t.Fatal("GET /cluster: hash_tags false; every node supports placement by tag")
	}
	whole := ringOf(v)
	whole.SetTags(whole.Nodes(), false)
	var a, b string
	for i := 0; a == ""; i++ {
		x, y := fmt.Sprintf("{user:%d}:a", i), fmt.Sprintf("{user:%d}:b", i)
		if whole.Owner(x) != whole.Owner(y) {
			a, b = x, y
		}
	}
	tag := a[:strings.IndexByte(a, '}')+1]
	ctx := context.Background()
	body := `redis.call('INCR', KEYS[1]) redis.call('INCRBY', KEYS[2], 2) redis.call('INCRBY', ARGV[1], 3)
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('GET', ARGV[1])}`
	for i, n := range c.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.resp, Protocol: 2, MaxRetries: -1})
		defer rdb.Close()
		got, err := rdb.Eval(ctx, body, []string{a, b}, tag+":c").StringSlice()
		k := i + 1
		if want := []string{fmt.Sprint(k), fmt.Sprint(2 * k), fmt.Sprint(3 * k)}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: EVAL over %s, %s (and %s:c) = %v, %v; want %v", n.id, a, b, tag, got, err, want)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.nodes[1].resp, Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Rename(ctx, a, tag+":renamed").Err(); err != nil {
		t.Fatalf("RENAME %s %s:renamed: %v", a, tag, err)
	}
	if got, err := rdb.Get(ctx, tag+":renamed").Int(); err != nil || got != 3 {
		t.Fatalf("GET %s:renamed = %d, %v; want 3", tag, got, err)
	}
}
