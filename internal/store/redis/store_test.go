package redisstore_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/counter"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}
func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *clock) Set(t time.Time)         { c.ms.Store(t.UnixMilli()) }

func open(t testing.TB, url string, o redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(context.Background(), url, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t testing.TB, tg *target) *redisstore.Store {
	t.Helper()
	return open(t, tg.url, redisstore.Options{})
}

func get(t *testing.T, s *redisstore.Store, id string) redisstore.Record {
	t.Helper()
	rec, found, err := s.Get(context.Background(), id)
	if err != nil || !found {
		t.Fatalf("Get(%q) = found %v, %v", id, found, err)
	}
	return rec
}

func testCounter(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	if _, found, err := s.Get(ctx, "a"); err != nil || found {
		t.Fatalf("Get missing = %v, %v", found, err)
	}
	for i, d := range []int64{5, -2, 10} {
		v, ver, err := s.Add(ctx, "a", redisstore.KindAuto, d, redisstore.AddOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ver != uint64(i+1) {
			t.Fatalf("version = %d, want %d", ver, i+1)
		}
		_ = v
	}
	rec := get(t, s, "a")
	if rec.Kind != redisstore.KindCounter || rec.Value != 13 || rec.Version != 3 || rec.TTL != 0 {
		t.Fatalf("record = %+v", rec)
	}
	if time.Since(rec.UpdatedAt) > time.Minute {
		t.Fatalf("updated_at = %v", rec.UpdatedAt)
	}
	// Large values survive exactly (no float rounding in Lua).
	v, _, err := s.Add(ctx, "big", redisstore.KindCounter, math.MaxInt64-1, redisstore.AddOptions{})
	if err != nil || v != math.MaxInt64-1 {
		t.Fatalf("Add big = %d, %v", v, err)
	}
	v, _, _ = s.Add(ctx, "big", redisstore.KindCounter, 1, redisstore.AddOptions{})
	if v != math.MaxInt64 || get(t, s, "big").Value != math.MaxInt64 {
		t.Fatalf("big = %d", v)
	}
}

func testSetVersionAndTTL(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	zero := uint64(0)
	ver, err := s.Set(ctx, "c", 100, &zero, 0)
	if err != nil || ver != 1 {
		t.Fatalf("Set new = %d, %v", ver, err)
	}
	if _, err := s.Set(ctx, "c", 7, &zero, 0); !errors.Is(err, redisstore.ErrVersionConflict) {
		t.Fatalf("Set with stale version = %v, want ErrVersionConflict", err)
	}
	if rec := get(t, s, "c"); rec.Value != 100 || rec.Version != 1 {
		t.Fatalf("after conflict: %+v", rec)
	}
	one := uint64(1)
	if ver, err = s.Set(ctx, "c", 7, &one, time.Minute); err != nil || ver != 2 {
		t.Fatalf("Set = %d, %v", ver, err)
	}
	rec := get(t, s, "c")
	if rec.Value != 7 || rec.TTL <= 50*time.Second || rec.TTL > time.Minute {
		t.Fatalf("after Set with TTL: %+v", rec)
	}
	// Add keeps the TTL.
	if v, ver, err := s.Add(ctx, "c", redisstore.KindCounter, 1, redisstore.AddOptions{}); err != nil || v != 8 || ver != 3 {
		t.Fatalf("Add = %d, %d, %v", v, ver, err)
	}
	if rec := get(t, s, "c"); rec.TTL == 0 {
		t.Fatal("Add removed the TTL")
	}
	if ok, err := s.Expire(ctx, "c", 0); err != nil || !ok {
		t.Fatalf("Expire 0 = %v, %v", ok, err)
	}
	if rec := get(t, s, "c"); rec.TTL != 0 {
		t.Fatalf("TTL after persist = %v", rec.TTL)
	}
	if ok, err := s.Expire(ctx, "c", 5*time.Second); err != nil || !ok {
		t.Fatalf("Expire = %v, %v", ok, err)
	}
	if rec := get(t, s, "c"); rec.TTL <= 0 || rec.TTL > 5*time.Second {
		t.Fatalf("TTL = %v", rec.TTL)
	}
	if ok, _ := s.Expire(ctx, "nope", time.Second); ok {
		t.Fatal("Expire of a missing counter reported true")
	}
	if ok, err := s.Delete(ctx, "c"); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if ok, _ := s.Delete(ctx, "c"); ok {
		t.Fatal("second Delete reported true")
	}
	if _, found, _ := s.Get(ctx, "c"); found {
		t.Fatal("found after Delete")
	}
	// A deleted counter starts again at version 1.
	if ver, _ := s.Set(ctx, "c", 1, &zero, 0); ver != 1 {
		t.Fatalf("version after re-create = %d", ver)
	}
}

func testSharded(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	o := redisstore.AddOptions{Shards: 4}
	var want int64
	for i := range 100 {
		v, _, err := s.Add(ctx, "sh", redisstore.KindSharded, int64(i), o)
		if err != nil {
			t.Fatal(err)
		}
		want += int64(i)
		if v != want {
			t.Fatalf("sum = %d, want %d", v, want)
		}
	}
	rec := get(t, s, "sh")
	if rec.Kind != redisstore.KindSharded || rec.Value != want || len(rec.Shards) != 4 || rec.Version != 100 {
		t.Fatalf("record = %+v", rec)
	}
	used := 0
	for _, v := range rec.Shards {
		if v != 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("random shard choice used %d of 4 shards: %v", used, rec.Shards)
	}
	// A fixed shard, and the auto kind, on an existing sharded counter.
	if _, _, err := s.Add(ctx, "sh", redisstore.KindAuto, 1000, redisstore.AddOptions{Fixed: true, Shard: 2}); err != nil {
		t.Fatal(err)
	}
	if rec2 := get(t, s, "sh"); rec2.Shards[2] != rec.Shards[2]+1000 {
		t.Fatalf("shard 2 = %d, want %d", rec2.Shards[2], rec.Shards[2]+1000)
	}
	if _, _, err := s.Add(ctx, "sh", redisstore.KindAuto, 1, redisstore.AddOptions{Fixed: true, Shard: 4}); !errors.Is(err, redisstore.ErrInvalidArgument) {
		t.Fatalf("shard out of range = %v", err)
	}
	if n, err := tg.rdb.Exists(ctx, redisstore.ShardKey("sh", 3)).Result(); err != nil || n != 1 {
		t.Fatalf("shard key %s missing: %d, %v", redisstore.ShardKey("sh", 3), n, err)
	}
	if ok, _ := s.Delete(ctx, "sh"); !ok {
		t.Fatal("Delete")
	}
	// What is left is the tombstone (docs/redis-tier.md, "Deletes and lives").
	if n := tg.dbsize(t); n != 1 {
		t.Fatalf("keys left after Delete: %d, want 1 (the tombstone)", n)
	}
	if n, err := tg.rdb.Exists(ctx, redisstore.ValueKey("sh")+":dead").Result(); err != nil || n != 1 {
		t.Fatalf("tombstone after Delete: %d, %v", n, err)
	}
}

func testWindow(t *testing.T, tg *target) {
	clk := newClock()
	clk.Set(time.Now().Truncate(time.Second))
	s := open(t, tg.url, redisstore.Options{Now: clk.Now})
	ctx := context.Background()
	o := redisstore.AddOptions{Window: counter.WindowSpec{Granularity: time.Second, Span: 5 * time.Second}}
	for i := range 5 {
		v, _, err := s.Add(ctx, "w", redisstore.KindWindow, 1, o)
		if err != nil {
			t.Fatal(err)
		}
		if v != int64(i+1) {
			t.Fatalf("window sum = %d, want %d", v, i+1)
		}
		clk.Advance(time.Second)
	}
	// Buckets at t0..t0+4s; now is t0+5s, so t0 has left the window.
	rec := get(t, s, "w")
	if rec.Value != 4 || len(rec.Buckets) != 4 || rec.Window.Span != 5*time.Second {
		t.Fatalf("record = %+v", rec)
	}
	if !rec.Buckets[0].Start.Before(rec.Buckets[1].Start) {
		t.Fatalf("buckets not oldest first: %v", rec.Buckets)
	}
	start := rec.Buckets[3].Start.UnixMilli()
	if d, err := tg.rdb.PTTL(ctx, redisstore.BucketKey("w", start)).Result(); err != nil || d <= 0 {
		t.Fatalf("bucket key PTTL = %v, %v, want a TTL", d, err)
	}
	clk.Advance(10 * time.Second)
	if rec := get(t, s, "w"); rec.Value != 0 || len(rec.Buckets) != 0 {
		t.Fatalf("after the window passed: %+v", rec)
	}
	// The spec is fixed by the first write.
	if _, _, err := s.Add(ctx, "w", redisstore.KindAuto, 2, redisstore.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if rec := get(t, s, "w"); rec.Window.Span != 5*time.Second || rec.Value != 2 {
		t.Fatalf("record = %+v", rec)
	}
}

func testHash(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	fs, ver, err := s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "views", Delta: 3}, {Name: "likes", Delta: 1}, {Name: "views", Delta: 2}})
	if err != nil || ver != 1 {
		t.Fatalf("HAdd = %v, %d, %v", fs, ver, err)
	}
	if fs[0] != (counter.Field{Name: "views", Value: 5}) || fs[1].Value != 1 {
		t.Fatalf("HAdd fields = %v", fs)
	}
	all, err := s.HGetAll(ctx, "h")
	if err != nil || len(all) != 2 || all[0].Name != "likes" || all[1].Value != 5 {
		t.Fatalf("HGetAll = %v, %v", all, err)
	}
	// Overflow in the second field: the first is undone, new fields removed.
	_, _, err = s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "views", Delta: 1}, {Name: "new", Delta: 1}, {Name: "likes", Delta: math.MaxInt64}})
	if !errors.Is(err, redisstore.ErrOverflow) {
		t.Fatalf("overflowing HAdd = %v, want ErrOverflow", err)
	}
	all2, _ := s.HGetAll(ctx, "h")
	if len(all2) != 2 || all2[0] != all[0] || all2[1] != all[1] {
		t.Fatalf("after overflow: %v, want %v", all2, all)
	}
	if rec := get(t, s, "h"); rec.Version != 1 {
		t.Fatalf("version after failed HAdd = %d", rec.Version)
	}
	// MinInt64 is undone exactly too.
	_, _, err = s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "likes", Delta: math.MinInt64}, {Name: "views", Delta: math.MaxInt64}})
	if !errors.Is(err, redisstore.ErrOverflow) {
		t.Fatalf("HAdd = %v", err)
	}
	if all3, _ := s.HGetAll(ctx, "h"); all3[0] != all[0] || all3[1] != all[1] {
		t.Fatalf("after MinInt64 undo: %v", all3)
	}
	if _, _, err := s.HAdd(ctx, "h", nil); !errors.Is(err, redisstore.ErrInvalidArgument) {
		t.Fatalf("empty HAdd = %v", err)
	}
}

func testHLL(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	for i := range 1000 {
		if _, err := s.PFAdd(ctx, "u1", []byte("user"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := s.PFAdd(ctx, "u1", []byte("user1"))
	if err != nil || changed {
		t.Fatalf("re-adding = %v, %v", changed, err)
	}
	items := make([][]byte, 2500) // more than one PFADD chunk in the script
	for i := range items {
		items[i] = []byte("user" + strconv.Itoa(500+i))
	}
	if changed, err := s.PFAdd(ctx, "u2", items...); err != nil || !changed {
		t.Fatalf("PFAdd batch = %v, %v", changed, err)
	}
	near := func(got, want int64) bool { return math.Abs(float64(got-want)) <= 0.03*float64(want) }
	if rec := get(t, s, "u1"); rec.Kind != redisstore.KindHLL || !near(rec.Value, 1000) {
		t.Fatalf("u1 = %+v", rec)
	}
	n, err := s.PFCount(ctx, "u1", "u2")
	if err != nil || !near(n, 3000) {
		t.Fatalf("PFCount union = %d, %v", n, err)
	}
	if n, err := s.PFCount(ctx, "u1"); err != nil || !near(n, 1000) {
		t.Fatalf("PFCount = %d, %v", n, err)
	}
}

func testWrongKindLeavesDataUnchanged(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	s.Add(ctx, "c", redisstore.KindCounter, 5, redisstore.AddOptions{})
	s.HAdd(ctx, "h", []counter.FieldDelta{{Name: "f", Delta: 1}})
	s.PFAdd(ctx, "p", []byte("x"))
	checks := []struct {
		name string
		err  error
	}{}
	add := func(name string, err error) {
		checks = append(checks, struct {
			name string
			err  error
		}{name, err})
	}
	_, _, err := s.Add(ctx, "c", redisstore.KindSharded, 1, redisstore.AddOptions{})
	add("sharded add to counter", err)
	_, _, err = s.Add(ctx, "h", redisstore.KindAuto, 1, redisstore.AddOptions{})
	add("add to hash", err)
	_, _, err = s.HAdd(ctx, "c", []counter.FieldDelta{{Name: "f", Delta: 1}})
	add("hadd to counter", err)
	_, err = s.PFAdd(ctx, "c", []byte("x"))
	add("pfadd to counter", err)
	_, err = s.Set(ctx, "h", 1, nil, 0)
	add("set of hash", err)
	_, err = s.PFCount(ctx, "c")
	add("pfcount of counter", err)
	_, err = s.HGetAll(ctx, "c")
	add("hgetall of counter", err)
	for _, c := range checks {
		if !errors.Is(c.err, redisstore.ErrWrongKind) {
			t.Errorf("%s: %v, want ErrWrongKind", c.name, c.err)
		}
	}
	if rec := get(t, s, "c"); rec.Value != 5 || rec.Version != 1 {
		t.Errorf("c = %+v", rec)
	}
	if rec := get(t, s, "h"); len(rec.Fields) != 1 || rec.Fields[0].Value != 1 || rec.Version != 1 {
		t.Errorf("h = %+v", rec)
	}
}

func testOverflowLeavesDataUnchanged(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	s.Add(ctx, "c", redisstore.KindCounter, math.MaxInt64, redisstore.AddOptions{})
	if _, _, err := s.Add(ctx, "c", redisstore.KindCounter, 1, redisstore.AddOptions{}); !errors.Is(err, redisstore.ErrOverflow) {
		t.Fatalf("Add = %v, want ErrOverflow", err)
	}
	if rec := get(t, s, "c"); rec.Value != math.MaxInt64 || rec.Version != 1 {
		t.Fatalf("after overflow: %+v", rec)
	}
	s.Add(ctx, "n", redisstore.KindCounter, math.MinInt64, redisstore.AddOptions{})
	if _, _, err := s.Add(ctx, "n", redisstore.KindCounter, -1, redisstore.AddOptions{}); !errors.Is(err, redisstore.ErrOverflow) {
		t.Fatalf("Add = %v, want ErrOverflow", err)
	}
	o := redisstore.AddOptions{Shards: 1}
	s.Add(ctx, "s", redisstore.KindSharded, math.MaxInt64, o)
	if _, _, err := s.Add(ctx, "s", redisstore.KindSharded, 1, o); !errors.Is(err, redisstore.ErrOverflow) {
		t.Fatalf("sharded Add = %v, want ErrOverflow", err)
	}
	if rec := get(t, s, "s"); rec.Value != math.MaxInt64 || rec.Version != 1 {
		t.Fatalf("after overflow: %+v", rec)
	}
}

func TestInvalid(t *testing.T) {
	s := newStore(t, single(t))
	ctx := context.Background()
	for _, id := range []string{"", "}x", string(make([]byte, 256))} {
		if _, _, err := s.Add(ctx, id, redisstore.KindAuto, 1, redisstore.AddOptions{}); !errors.Is(err, redisstore.ErrInvalidArgument) {
			t.Errorf("Add(%q) = %v", id, err)
		}
	}
	if _, _, err := s.Add(ctx, "x", redisstore.KindHash, 1, redisstore.AddOptions{}); !errors.Is(err, redisstore.ErrInvalidArgument) {
		t.Errorf("Add of kind hash = %v", err)
	}
	if _, err := redisstore.Open(ctx, "redis://%zz", redisstore.Options{}); !errors.Is(err, redisstore.ErrInvalidArgument) {
		t.Errorf("Open bad url = %v", err)
	}
}

// keySlot is Redis Cluster's HASH_SLOT: CRC16-XMODEM of the key's hash tag
// (the part between the first '{' and the next '}', if not empty) mod 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

func TestHashTagsOneSlot(t *testing.T) {
	// Reference values from the Redis Cluster specification and redis-cli.
	if got := keySlot("123456789"); got != 0x31C3 {
		t.Fatalf("keySlot(123456789) = %#x, want 0x31c3", got)
	}
	if got := keySlot("foo"); got != 12182 {
		t.Fatalf("keySlot(foo) = %d, want 12182", got)
	}
	if keySlot("{user1000}.following") != keySlot("{user1000}.followers") {
		t.Fatal("keySlot ignores hash tags")
	}
	for _, id := range []string{"page_views:article_123", "a{b}c", "x}y", "ünï", "a"} {
		ks := []string{redisstore.ValueKey(id), redisstore.MetaKey(id), redisstore.ShardKey(id, 0),
			redisstore.ShardKey(id, 7), redisstore.BucketKey(id, 1704708000000)}
		for _, k := range ks[1:] {
			if keySlot(k) != keySlot(ks[0]) {
				t.Errorf("id %q: %q in slot %d, %q in %d", id, ks[0], keySlot(ks[0]), k, keySlot(k))
			}
		}
	}
	if keySlot(redisstore.ValueKey("a")) == keySlot(redisstore.ValueKey("b")) {
		t.Error("different ids share a slot (possible, but not for a and b)")
	}
}

// TestHashTagsClusterKeySlot asks a cluster-enabled Redis for the slots.
func TestHashTagsClusterKeySlot(t *testing.T) {
	srv := redistest.NewArgs(t, "--cluster-enabled", "yes") // nodes.conf goes to the test's --dir
	for _, id := range []string{"page_views:article_123", "a{b}c", "x}y", "a"} {
		for _, k := range []string{redisstore.ValueKey(id), redisstore.MetaKey(id), redisstore.ShardKey(id, 3),
			redisstore.BucketKey(id, 1704708000000)} {
			r, err := srv.Do("CLUSTER", "KEYSLOT", k)
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT %s: %v", k, err)
			}
			if want := ":" + strconv.Itoa(keySlot(redisstore.ValueKey(id))); r != want {
				t.Errorf("CLUSTER KEYSLOT %s = %s, want %s (slot of %s)", k, r, want, redisstore.ValueKey(id))
			}
		}
	}
}

func testScriptsSurviveScriptFlush(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{})
	tg.scriptFlush(t)
	if v, _, err := s.Add(ctx, "c", redisstore.KindAuto, 1, redisstore.AddOptions{}); err != nil || v != 2 {
		t.Fatalf("Add after SCRIPT FLUSH = %d, %v", v, err)
	}
	if rec := get(t, s, "c"); rec.Value != 2 {
		t.Fatalf("Get after SCRIPT FLUSH = %+v", rec)
	}
}

func testConcurrentAddsSumExactly(t *testing.T, tg *target) {
	s := newStore(t, tg)
	ctx := context.Background()
	const goroutines, each = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				kind, id := redisstore.KindCounter, "c"
				if i%2 == 1 {
					kind, id = redisstore.KindSharded, "s"
				}
				if _, _, err := s.Add(ctx, id, kind, int64(g+1), redisstore.AddOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(each/2) * goroutines * (goroutines + 1) / 2
	if rec := get(t, s, "c"); rec.Value != want || rec.Version != goroutines*each/2 {
		t.Fatalf("counter = %d v%d, want %d v%d", rec.Value, rec.Version, want, goroutines*each/2)
	}
	if rec := get(t, s, "s"); rec.Value != want {
		t.Fatalf("sharded = %d, want %d", rec.Value, want)
	}
}
