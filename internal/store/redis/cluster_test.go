package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// spreadIDs returns n ids whose keys are on n different masters of a
// cluster (any n ids on a single server).
func spreadIDs(t *testing.T, tg *target, prefix string, n int) []string {
	t.Helper()
	c, ok := tg.rdb.(*redis.ClusterClient)
	if !ok {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = prefix + strconv.Itoa(i)
		}
		return ids
	}
	seen := map[string]bool{}
	var ids []string
	for i := 0; len(ids) < n && i < 1000; i++ {
		id := prefix + strconv.Itoa(i)
		m, err := c.MasterForKey(context.Background(), redisstore.ValueKey(id))
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !seen[addr] {
			seen[addr] = true
			ids = append(ids, id)
		}
	}
	if len(ids) < n {
		t.Fatalf("found ids on %d masters, want %d", len(ids), n)
	}
	return ids
}

// scratchKeys lists keys left by the raw-merge scripts on any master.
func scratchKeys(t *testing.T, tg *target) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	tg.forEachMaster(t, func(ctx context.Context, m *redis.Client) error {
		ks, err := m.Keys(ctx, "*:tmp:*").Result()
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	})
	return out
}

// testPFMergeAndCountAcrossIDs: PFCOUNT of several ids and PFMERGE keep
// Redis' exact results when the ids live on different masters.
func testPFMergeAndCountAcrossIDs(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	ids := spreadIDs(t, tg, "u", 3)
	a, b, missing := ids[0], ids[1], ids[2]
	items := func(from, to int) [][]byte {
		var out [][]byte
		for i := from; i < to; i++ {
			out = append(out, []byte("user"+strconv.Itoa(i)))
		}
		return out
	}
	if _, err := s.PFAdd(ctx, a, items(0, 1000)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PFAdd(ctx, b, items(500, 3000)...); err != nil {
		t.Fatal(err)
	}
	// Redis' own answer: the same sketches side by side in one slot.
	var want int64
	{
		ra, _ := s.RawHLL(ctx, a)
		rb, _ := s.RawHLL(ctx, b)
		tg.rdb.Set(ctx, "ref:{x}:a", ra, 0)
		tg.rdb.Set(ctx, "ref:{x}:b", rb, 0)
		var err error
		if want, err = tg.rdb.PFCount(ctx, "ref:{x}:a", "ref:{x}:b").Result(); err != nil {
			t.Fatal(err)
		}
		tg.rdb.Del(ctx, "ref:{x}:a", "ref:{x}:b")
	}
	if math.Abs(float64(want-3000)) > 90 {
		t.Fatalf("reference union estimate %d, want about 3000", want)
	}
	n, err := s.PFCount(ctx, a, b, missing)
	if err != nil || n != want {
		t.Fatalf("PFCount(%s, %s, %s) = %d, %v, want %d", a, b, missing, n, err, want)
	}
	est, ver, err := s.PFMerge(ctx, "dst", []string{a, b, missing})
	if err != nil || est != want || ver != 1 {
		t.Fatalf("PFMerge = %d v%d, %v, want %d v1", est, ver, err, want)
	}
	if rec := get(t, s, "dst"); rec.Kind != redisstore.KindHLL || rec.Value != want {
		t.Fatalf("dst = %+v", rec)
	}
	if n, err := s.PFCount(ctx, a); err != nil || math.Abs(float64(n-1000)) > 30 {
		t.Fatalf("source %s after merge = %d, %v", a, n, err)
	}
	// Merging again (dst among the sources) changes no estimate.
	if est, ver, err := s.PFMerge(ctx, "dst", []string{"dst", a}); err != nil || est != want || ver != 2 {
		t.Fatalf("second PFMerge = %d v%d, %v", est, ver, err)
	}
	// A source of another kind fails and changes nothing.
	s.Add(ctx, "c", redisstore.KindCounter, 1, redisstore.AddOptions{})
	if _, _, err := s.PFMerge(ctx, "dst", []string{a, "c"}); !errors.Is(err, redisstore.ErrWrongKind) {
		t.Fatalf("PFMerge with a counter source = %v, want ErrWrongKind", err)
	}
	if _, err := s.PFCount(ctx, a, "c"); !errors.Is(err, redisstore.ErrWrongKind) {
		t.Fatalf("PFCount with a counter = %v, want ErrWrongKind", err)
	}
	// A corrupt sketch behind an hll meta (written around the store) is
	// refused by Redis' HLL check, and the destination is left alone.
	tg.rdb.HSet(ctx, redisstore.MetaKey("bad"), "kind", "hll", "version", 1)
	tg.rdb.Set(ctx, redisstore.ValueKey("bad"), "not a sketch", 0)
	if _, _, err := s.PFMerge(ctx, "dst", []string{a, "bad"}); !errors.Is(err, redisstore.ErrWrongKind) {
		t.Fatalf("PFMerge with a corrupt source = %v, want ErrWrongKind", err)
	}
	if rec := get(t, s, "dst"); rec.Value != want || rec.Version != 2 {
		t.Fatalf("dst after failed merges = %+v, want %d v2", rec, want)
	}
	if ks := scratchKeys(t, tg); len(ks) != 0 {
		t.Fatalf("scratch keys left: %v", ks)
	}
}

// testFlushCounters: FlushCounters removes the counter keys on every
// master and nothing else.
func testFlushCounters(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	const n = 60
	for i := range n {
		id := "f" + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			_, _, err := s.Add(ctx, id, redisstore.KindCounter, 1, redisstore.AddOptions{})
			if err != nil {
				t.Fatal(err)
			}
		case 1:
			if _, _, err := s.Add(ctx, id, redisstore.KindSharded, 1, redisstore.AddOptions{Shards: 2}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := s.PFAdd(ctx, id, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 5 {
		tg.rdb.Set(ctx, fmt.Sprintf("other:%d", i), 1, 0)
	}
	perMaster := map[string]int64{}
	var mu sync.Mutex
	tg.forEachMaster(t, func(ctx context.Context, m *redis.Client) error {
		k, err := m.DBSize(ctx).Result()
		mu.Lock()
		perMaster[m.Options().Addr] = k
		mu.Unlock()
		return err
	})
	for addr, k := range perMaster {
		if k == 0 {
			t.Fatalf("master %s holds no keys: the test does not spread (%v)", addr, perMaster)
		}
	}
	// Two keys each: meta and the value (counter, hll) or the one shard added to.
	want := 2 * n
	got, err := s.FlushCounters(ctx)
	if err != nil || got != want {
		t.Fatalf("FlushCounters = %d, %v, want %d", got, err, want)
	}
	if k := tg.dbsize(t); k != 5 {
		t.Fatalf("%d keys left, want the 5 other keys", k)
	}
	if _, found, _ := s.Get(ctx, "f0"); found {
		t.Fatal("f0 found after FlushCounters")
	}
}

// testURLForms: Open tells a cluster from a single server by the URL, and
// a cluster can be named by one seed node with cluster=true.
func testURLForms(t *testing.T, tg *target) {
	ctx := context.Background()
	s := newStore(t, tg)
	if s.Cluster() != (tg.cl != nil) {
		t.Fatalf("Cluster() = %v for %s", s.Cluster(), tg.url)
	}
	if _, ok := s.Client().(*redis.ClusterClient); ok != s.Cluster() {
		t.Fatalf("Client() is %T", s.Client())
	}
	if tg.cl == nil {
		return
	}
	for _, seed := range tg.cl.Addrs() {
		one := open(t, "redis://"+seed+"?cluster=true", redisstore.Options{})
		if !one.Cluster() {
			t.Fatalf("%s?cluster=true is not a cluster", seed)
		}
		for _, id := range spreadIDs(t, tg, "seed", 3) {
			if _, _, err := one.Add(ctx, id, redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil {
				t.Fatalf("Add %s through seed %s: %v", id, seed, err)
			}
		}
	}
	for _, id := range spreadIDs(t, tg, "seed", 3) {
		if rec := get(t, s, id); rec.Value != 3 {
			t.Fatalf("%s = %d, want 3 (one add per seed)", id, rec.Value)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url     string
		cluster bool
		addrs   []string
	}{
		{"127.0.0.1:6379", false, []string{"127.0.0.1:6379"}},
		{"redis://127.0.0.1:6379/2", false, []string{"127.0.0.1:6379"}},
		{"redis://127.0.0.1:6379?cluster=false", false, []string{"127.0.0.1:6379"}},
		{"redis://a:1?addr=b:2&addr=c:3", true, []string{"a:1", "b:2", "c:3"}},
		{"redis://a:1/0?addr=b:2", true, []string{"a:1", "b:2"}},
		{"redis://a:1?cluster=true", true, []string{"a:1"}},
		{"rediss://u:p@a:1?cluster=1&read_timeout=2s", true, []string{"a:1"}},
	} {
		co, ro, err := redisstore.ParseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if (co != nil) != c.cluster || (co == nil) == (ro == nil) {
			t.Errorf("%s: cluster %v, single %v", c.url, co != nil, ro != nil)
			continue
		}
		if co != nil && strings.Join(co.Addrs, ",") != strings.Join(c.addrs, ",") {
			t.Errorf("%s: addrs %v, want %v", c.url, co.Addrs, c.addrs)
		}
		if ro != nil && ro.Addr != c.addrs[0] {
			t.Errorf("%s: addr %s", c.url, ro.Addr)
		}
	}
	for _, bad := range []string{
		"redis://%zz",
		"redis://a:1?cluster=maybe",
		"redis://a:1/3?addr=b:2",
		"redis://a:1?addr=nohostport",
		"redis://a:1?addr=b:2&bogus=1",
		"http://a:1?addr=b:2",
		"redis://a:1?addr=b:2&read_only=true",
		"redis://a:1?cluster=true&route_randomly=true",
	} {
		if _, _, err := redisstore.ParseURL(bad); !errors.Is(err, redisstore.ErrInvalidArgument) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestParseURLProperties: a cluster URL built from any address list reads
// back as that list; any string yields exactly one result or a typed error.
func TestParseURLProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hosts := rapid.SliceOfN(rapid.StringMatching(`[a-z][a-z0-9.-]{0,15}`), 1, 6).Draw(t, "hosts")
		ports := rapid.SliceOfN(rapid.IntRange(1, 65535), len(hosts), len(hosts)).Draw(t, "ports")
		addrs := make([]string, len(hosts))
		u := ""
		for i := range hosts {
			addrs[i] = hosts[i] + ":" + strconv.Itoa(ports[i])
			switch i {
			case 0:
				u = "redis://" + addrs[0]
			case 1:
				u += "?addr=" + addrs[1]
			default:
				u += "&addr=" + addrs[i]
			}
		}
		if len(addrs) == 1 {
			u += "?cluster=true"
		}
		co, ro, err := redisstore.ParseURL(u)
		if err != nil || ro != nil || co == nil {
			t.Fatalf("ParseURL(%q) = %v, %v, %v", u, co, ro, err)
		}
		if strings.Join(co.Addrs, ",") != strings.Join(addrs, ",") {
			t.Fatalf("ParseURL(%q) addrs %v, want %v", u, co.Addrs, addrs)
		}

		any := rapid.String().Draw(t, "any")
		co, ro, err = redisstore.ParseURL(any)
		if err != nil {
			if !errors.Is(err, redisstore.ErrInvalidArgument) || co != nil || ro != nil {
				t.Fatalf("ParseURL(%q) = %v, %v, %v", any, co, ro, err)
			}
		} else if (co == nil) == (ro == nil) {
			t.Fatalf("ParseURL(%q): cluster %v, single %v", any, co != nil, ro != nil)
		}
	})
}

// TestClusterSlotMigration moves the slot of a counter to another master
// while the store uses it, as redis-cli --cluster reshard does: the store
// follows ASK while the keys are on the importing node and MOVED after
// the slot changes owner, and no increment is lost or applied twice.
func TestClusterSlotMigration(t *testing.T) {
	cl := redistest.NewCluster(t)
	tg := onCluster(t, cl)
	s := newStore(t, tg)
	ctx := context.Background()
	c := tg.rdb.(*redis.ClusterClient)
	const id = "moving"
	add := func(want int64) {
		t.Helper()
		if v, _, err := s.Add(ctx, id, redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil || v != want {
			t.Fatalf("Add = %d, %v, want %d", v, err, want)
		}
	}
	add(1)
	slot, err := c.ClusterKeySlot(ctx, redisstore.ValueKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.MasterForKey(ctx, redisstore.ValueKey(id))
	if err != nil {
		t.Fatal(err)
	}
	var dst *redis.Client
	for _, addr := range cl.Addrs() {
		if addr != src.Options().Addr {
			dst = redis.NewClient(&redis.Options{Addr: addr})
			defer dst.Close()
			break
		}
	}
	srcID, err1 := src.Do(ctx, "CLUSTER", "MYID").Text()
	dstID, err2 := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err := errors.Join(err1, err2,
		dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(),
		src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err()); err != nil {
		t.Fatal(err)
	}
	add(2) // keys still on the source
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	if err := src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", redisstore.ValueKey(id), redisstore.MetaKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	add(3) // the source answers ASK
	if rec := get(t, s, id); rec.Value != 3 || rec.Version != 3 {
		t.Fatalf("during migration: %+v", rec)
	}
	for _, addr := range cl.Addrs() {
		m := redis.NewClient(&redis.Options{Addr: addr})
		err := m.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	add(4) // the source answers MOVED
	if n, err := dst.Exists(ctx, redisstore.ValueKey(id), redisstore.MetaKey(id)).Result(); err != nil || n != 2 {
		t.Fatalf("keys on the new owner: %d, %v", n, err)
	}
	if rec := get(t, s, id); rec.Value != 4 || rec.Version != 4 {
		t.Fatalf("after migration: %+v", rec)
	}
}

// TestClusterFailover fails a master over to its replica (CLUSTER
// FAILOVER) while increments run: the store follows the new master, every
// increment is acknowledged, and the value equals their count.
func TestClusterFailover(t *testing.T) {
	cl := redistest.NewCluster(t)
	tg := onCluster(t, cl)
	// A manual failover can leave a node answering CLUSTERDOWN until the
	// new master's configuration has spread, which on a loaded machine
	// takes longer than the default three retries (about 60 ms): give
	// the store a retry budget of about 10 s, as a deployment riding
	// through failovers would.
	s := open(t, tg.url, redisstore.Options{ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: 40})
	ctx := context.Background()
	const id = "failover"
	if _, _, err := s.Add(ctx, id, redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := tg.rdb.(*redis.ClusterClient).MasterForKey(ctx, redisstore.ValueKey(id))
	if err != nil {
		t.Fatal(err)
	}
	rep := cl.AddReplica(t, m.Options().Addr)

	var acked atomic.Int64
	acked.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := s.Add(ctx, id, redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil {
					errs <- err
					return
				}
				acked.Add(1)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // increments before the failover
	before := acked.Load()
	cl.Failover(t, rep)
	time.Sleep(50 * time.Millisecond) // and after
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Add during failover: %v", err)
	}
	after := acked.Load()
	if after <= before {
		t.Fatalf("no increment acknowledged after the failover started (%d before, %d after)", before, after)
	}
	rec := get(t, s, id)
	if rec.Value != after {
		t.Fatalf("value %d after failover, %d increments acknowledged", rec.Value, after)
	}
	direct := redis.NewClient(&redis.Options{Addr: rep})
	defer direct.Close()
	if v, err := direct.Get(ctx, redisstore.ValueKey(id)).Int64(); err != nil || v != after {
		t.Fatalf("value on the new master %s = %d, %v, want %d", rep, v, err, after)
	}
	t.Logf("%d increments, %d before the failover", after, before)
}

// testPFUnionProperty: for random sketches on random ids, PFCount of
// several ids and PFMerge equal Redis' own PFCOUNT of the same sketches
// side by side in one slot, and PFMerge is order-insensitive and
// idempotent.
func testPFUnionProperty(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	round := 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		n := rapid.IntRange(1, 5).Draw(rt, "ids")
		ids := make([]string, n)
		refs := make([]string, 0, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("p%d:%d", round, i)
			items := rapid.SliceOfN(rapid.IntRange(0, 5000), 0, 300).Draw(rt, "items")
			if len(items) == 0 {
				continue // a missing counter counts as empty
			}
			b := make([][]byte, len(items))
			for j, it := range items {
				b[j] = []byte(strconv.Itoa(it))
			}
			if _, err := s.PFAdd(ctx, ids[i], b...); err != nil {
				rt.Fatal(err)
			}
			raw, err := s.RawHLL(ctx, ids[i])
			if err != nil {
				rt.Fatal(err)
			}
			ref := fmt.Sprintf("ref:{p%d}:%d", round, i)
			tg.rdb.Set(ctx, ref, raw, 0)
			refs = append(refs, ref)
		}
		var want int64
		if len(refs) > 0 {
			var err error
			if want, err = tg.rdb.PFCount(ctx, refs...).Result(); err != nil {
				rt.Fatal(err)
			}
			tg.rdb.Del(ctx, refs...)
		}
		if got, err := s.PFCount(ctx, ids...); err != nil || got != want {
			rt.Fatalf("PFCount(%v) = %d, %v, want %d", ids, got, err, want)
		}
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		for k, srcs := range [][]string{ids, rev, ids} {
			dst := fmt.Sprintf("d%d:%d", round, k%2)
			if est, _, err := s.PFMerge(ctx, dst, srcs); err != nil || est != want {
				rt.Fatalf("PFMerge(%s, %v) = %d, %v, want %d", dst, srcs, est, err, want)
			}
		}
	})
	if ks := scratchKeys(t, tg); len(ks) != 0 {
		t.Fatalf("scratch keys left: %v", ks)
	}
}
