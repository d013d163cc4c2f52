package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRespKeyspace runs RENAME, RENAMENX, COPY, HRANDFIELD, RANDOMKEY and
// the monitoring commands on one node's Redis-protocol front end (keys
// given in pairs of one owner) and reads the results on another
// (possibly the same) node.
func testRespKeyspace(t *testing.T, ctx context.Context, rdb, other *redis.Client, httpBase, src, dst, mode string) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	must("SET", rdb.Set(ctx, src, 41, 0).Err())
	must("EXPIREAT", rdb.ExpireAt(ctx, src, at).Err())
	must("RENAME", rdb.Rename(ctx, src, dst).Err())
	if v, err := other.Get(ctx, dst).Int64(); err != nil || v != 41 {
		t.Fatalf("GET %s after RENAME = %d, %v", dst, v, err)
	}
	if n, _ := other.Exists(ctx, src).Result(); n != 0 {
		t.Fatalf("%s exists after RENAME", src)
	}
	// The tiered mode keeps relative TTLs in Redis: its EXPIRETIME may be
	// a second early (docs/resp.md).
	if exp, err := other.ExpireTime(ctx, dst).Result(); err != nil || exp/time.Second != time.Duration(at.Unix()) && !(mode == "tiered" && exp/time.Second == time.Duration(at.Unix()-1)) {
		t.Fatalf("EXPIRETIME %s after RENAME = %d, %v; want %d", dst, exp/time.Second, err, at.Unix())
	}
	if ok, err := rdb.RenameNX(ctx, dst, dst).Result(); err != nil || ok {
		t.Fatalf("RENAMENX onto itself = %v, %v", ok, err)
	}
	if n, err := rdb.Copy(ctx, dst, src, 0, false).Result(); err != nil || n != 1 {
		t.Fatalf("COPY = %d, %v", n, err)
	}
	if n, err := rdb.Copy(ctx, dst, src, 0, false).Result(); err != nil || n != 0 {
		t.Fatalf("COPY onto an existing key = %d, %v", n, err)
	}
	if v, err := other.Get(ctx, src).Int64(); err != nil || v != 41 {
		t.Fatalf("GET %s after COPY = %d, %v", src, v, err)
	}
	// A hash and an hll move whole.
	must("DEL", rdb.Del(ctx, src, dst).Err())
	must("HSET", rdb.HSet(ctx, src, "f", 3).Err())
	must("RENAME hash", rdb.Rename(ctx, src, dst).Err())
	if m, err := other.HGetAll(ctx, dst).Result(); err != nil || m["f"] != "3" || len(m) != 1 {
		t.Fatalf("HGETALL after RENAME = %v, %v", m, err)
	}
	if f, err := rdb.HRandField(ctx, dst, 1).Result(); err != nil || len(f) != 1 || f[0] != "f" {
		t.Fatalf("HRANDFIELD = %v, %v", f, err)
	}
	if kv, err := rdb.HRandFieldWithValues(ctx, dst, -3).Result(); err != nil || len(kv) != 3 || kv[0].Key != "f" || kv[0].Value != "3" {
		t.Fatalf("HRANDFIELD -3 WITHVALUES = %v, %v", kv, err)
	}
	must("DEL", rdb.Del(ctx, dst).Err())
	must("PFADD", rdb.PFAdd(ctx, src, "a", "b", "c").Err())
	must("COPY hll", rdb.Copy(ctx, src, dst, 0, true).Err())
	if n, err := other.PFCount(ctx, dst).Result(); err != nil || n != 3 {
		t.Fatalf("PFCOUNT after COPY = %d, %v", n, err)
	}
	if n, err := rdb.PFAdd(ctx, dst, "a", "b", "c").Result(); err != nil || n != 0 {
		t.Fatalf("PFADD of the copied hll's items = %d, %v (the registers did not move)", n, err)
	}
	if err := rdb.Incr(ctx, dst).Err(); err == nil || err.Error() != "ERR value is not an integer or out of range" {
		t.Fatalf("INCR of an hll: %v", err)
	}
	if k, err := rdb.RandomKey(ctx).Result(); err != nil || k == "" {
		t.Fatalf("RANDOMKEY = %q, %v", k, err)
	}
	info, err := rdb.Info(ctx, "server", "replication").Result()
	must("INFO", err)
	for _, want := range []string{"counterd_mode:" + mode, "role:master", "redis_version:7.0.15"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO has no %s:\n%s", want, info)
		}
	}
	if role, err := rdb.Do(ctx, "ROLE").Slice(); err != nil || len(role) != 3 || role[0] != "master" {
		t.Errorf("ROLE = %v, %v", role, err)
	}
	must("DEL", rdb.Del(ctx, src, dst).Err())

	// The kinds only the HTTP API creates: RENAME carries their kind and
	// value (a window its buckets), read back over HTTP. In a cluster,
	// sharded and pn adds are applied by the receiving node and reach the
	// owner later (Capabilities.LaggingCRDTAdds), so only the window is
	// renamed right after its creation there.
	kinds := []string{`{"kind":"sharded","delta":5,"shards":4}`, `{"kind":"pn","delta":-3}`, `{"kind":"window","delta":7,"granularity":"1s","window":"60s"}`}
	if mode == "cluster" {
		kinds = kinds[2:]
	}
	for _, body := range kinds {
		if code, m, _, err := post(httpBase+"/counters/"+src+"/increment", "", body); err != nil || code != 200 {
			t.Fatalf("create %s: %d %v %v", body, code, m, err)
		}
		before := getCounter(t, httpBase, src)
		must("RENAME "+body, rdb.Rename(ctx, src, dst).Err())
		after := getCounter(t, httpBase, dst)
		if after["kind"] != before["kind"] || after["value"] != before["value"] || fmt.Sprint(after["buckets"]) != fmt.Sprint(before["buckets"]) {
			t.Errorf("RENAME of %s: %v, was %v", body, after, before)
		}
		if v := getCounter(t, httpBase, src); v["exists"] != false {
			t.Errorf("%s exists after RENAME: %v", src, v)
		}
		must("DEL", rdb.Del(ctx, dst).Err())
	}
}

// getCounter is GET /counters/{id}'s body.
func getCounter(t *testing.T, base, id string) map[string]any {
	t.Helper()
	resp, err := client.Get(base + "/counters/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestClusterRespKeyspace: in cluster mode RENAME and COPY of keys of one
// owner work from any node (and are read back on the other), keys of two
// owners are refused with CROSSSLOT and nothing changes.
func TestClusterRespKeyspace(t *testing.T) {
	c := newCluster(t, 2, loopback)
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Addr: c.nodes[0].resp, Protocol: 2, MaxRetries: -1})
	b := redis.NewClient(&redis.Options{Addr: c.nodes[1].resp, Protocol: 3, MaxRetries: -1})
	defer a.Close()
	defer b.Close()
	// Pair k0 with every other key: one owner or two, as the ring says.
	var same, cross []string
	if err := a.Set(ctx, "k0", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 24; i++ {
		k := fmt.Sprintf("k%d", i)
		err := a.Copy(ctx, "k0", k, 0, false).Err()
		switch {
		case err == nil:
			same = append(same, k)
		case err.Error() == "CROSSSLOT Keys in request don't hash to the same slot":
			cross = append(cross, k)
			if n, _ := b.Exists(ctx, k).Result(); n != 0 {
				t.Fatalf("COPY refused with CROSSSLOT wrote %s", k)
			}
		default:
			t.Fatalf("COPY k0 %s: %v", k, err)
		}
	}
	if len(same) == 0 || len(cross) == 0 {
		t.Fatalf("24 keys on 2 nodes: one owner with k0 %v, another %v", same, cross)
	}
	if err := a.Rename(ctx, "k0", cross[0]).Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Fatalf("RENAME across owners: %v", err)
	}
	a.Del(ctx, append([]string{"k0"}, same...)...)
	testRespKeyspace(t, ctx, a, b, c.nodes[1].url, "k0", same[0], "cluster")
	testRespKeyspace(t, ctx, b, a, c.nodes[0].url, "k0", same[0], "cluster")
}

// TestTieredRespKeyspace: the same on the tiered mode (Redis and
// PostgreSQL).
func TestTieredRespKeyspace(t *testing.T) {
	env := newTieredEnv(t)
	respAddr := "127.0.0.1:" + freePort(t)
	p := env.start(t, "--resp", respAddr)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Protocol: 3, MaxRetries: -1})
	defer rdb.Close()
	testRespKeyspace(t, ctx, rdb, rdb, p.addr, "ren:a", "ren:b", "tiered")
}
