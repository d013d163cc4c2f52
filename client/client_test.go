package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/client"
)

func newClient(t *testing.T, opts ...client.Option) (*client.Client, context.Context) {
	t.Helper()
	c, err := client.New(startServer(t, nil), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, t.Context()
}

// must(f()).ok(t) fails the test if f returned an error, else returns
// f's value.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

func (r result[T]) ok(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

// wantCode checks that err is the *client.Error with the given status and
// code, and that it matches sentinel with errors.Is.
func wantCode(t *testing.T, err error, status int, code string, sentinel error) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want *client.Error %s", err, err, code)
	}
	if ce.Status != status || ce.Code != code {
		t.Fatalf("error status %d code %q, want %d %q (%v)", ce.Status, ce.Code, status, code, err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %v) = false", err, sentinel)
	}
}

func TestNew(t *testing.T) {
	for _, addr := range []string{"", "ftp://x", "http://", "::bad"} {
		if _, err := client.New(addr); err == nil {
			t.Errorf("New(%q): no error", addr)
		}
	}
	c, err := client.New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Addr(); got != "http://127.0.0.1:1" {
		t.Errorf("Addr() = %q", got)
	}
	if _, err := client.New("http://x", client.WithDefaultDurability("eventually")); err == nil {
		t.Error("New with a bad durability: no error")
	}
}

func TestIncrDecrGet(t *testing.T) {
	c, ctx := newClient(t)
	v := must(c.Get(ctx, "page:1")).ok(t)
	if v.Exists || v.Value != 0 || v.Version != 0 || v.Kind != client.KindNone || !v.UpdatedAt.IsZero() {
		t.Fatalf("missing counter: %+v", v)
	}
	r := must(c.Incr(ctx, "page:1", 1)).ok(t)
	if r.Value != 1 || r.ID != "page:1" || r.Kind != client.KindCounter || r.Replayed {
		t.Fatalf("Incr: %+v", r)
	}
	r = must(c.Incr(ctx, "page:1", 5)).ok(t)
	if r.Value != 6 {
		t.Fatalf("Incr 5: %+v", r)
	}
	r = must(c.Decr(ctx, "page:1", 2)).ok(t)
	if r.Value != 4 {
		t.Fatalf("Decr 2: %+v", r)
	}
	r = must(c.Incr(ctx, "page:1", -4)).ok(t)
	if r.Value != 0 {
		t.Fatalf("Incr -4: %+v", r)
	}
	v = must(c.Get(ctx, "page:1")).ok(t)
	if !v.Exists || v.Value != 0 || v.Kind != client.KindCounter || v.Version != r.Version || v.Version == 0 {
		t.Fatalf("Get: %+v (last version %d)", v, r.Version)
	}
	if d := time.Since(v.UpdatedAt); d < -time.Minute || d > time.Minute {
		t.Fatalf("UpdatedAt %v is not now", v.UpdatedAt)
	}
}

func TestIDsNeedingEscapes(t *testing.T) {
	c, ctx := newClient(t)
	for i, id := range []string{"a/b", "a b", "ünï:cødé", "%2F", "?x=1#y", ".", "..", "a*", "+plus", strings255()} {
		r, err := c.Incr(ctx, id, int64(i+1))
		if err != nil {
			t.Fatalf("Incr(%q): %v", id, err)
		}
		if r.ID != id || r.Value != int64(i+1) {
			t.Fatalf("Incr(%q) = %+v", id, r)
		}
		v := must(c.Get(ctx, id)).ok(t)
		if v.ID != id || v.Value != int64(i+1) {
			t.Fatalf("Get(%q) = %+v", id, v)
		}
	}
}

func strings255() string { return string(slices.Repeat([]byte{'x'}, 255)) }

func TestInvalidID(t *testing.T) {
	c, ctx := newClient(t)
	_, err := c.Incr(ctx, "", 1)
	if !errors.Is(err, client.ErrInvalidID) {
		t.Fatalf("empty id: %v", err)
	}
	_, err = c.Incr(ctx, "bad\x01id", 1)
	wantCode(t, err, 400, client.CodeInvalidID, client.ErrInvalidID)
	_, err = c.Get(ctx, strings255()+"x")
	wantCode(t, err, 400, client.CodeInvalidID, client.ErrInvalidID)
}

func TestSetAndVersions(t *testing.T) {
	c, ctx := newClient(t)
	r := must(c.Set(ctx, "s", 10, client.WithExpectedVersion(0))).ok(t)
	if r.Value != 10 || r.Version == 0 {
		t.Fatalf("Set: %+v", r)
	}
	_, err := c.Set(ctx, "s", 11, client.WithExpectedVersion(0))
	wantCode(t, err, 409, client.CodeVersionConflict, client.ErrVersionConflict)
	_, err = c.Set(ctx, "s", 11, client.WithExpectedVersion(r.Version+1))
	wantCode(t, err, 409, client.CodeVersionConflict, client.ErrVersionConflict)
	r2 := must(c.Set(ctx, "s", 11, client.WithExpectedVersion(r.Version), client.WithDurability("sync"))).ok(t)
	if r2.Value != 11 || r2.Version <= r.Version {
		t.Fatalf("Set with version: %+v after %+v", r2, r)
	}
	if v := must(c.Get(ctx, "s")).ok(t); v.Value != 11 || v.Version != r2.Version {
		t.Fatalf("Get: %+v", v)
	}

	// Set with a TTL, and Set without one clears it.
	must(c.Set(ctx, "s", 12, client.WithTTL(time.Minute))).ok(t)
	ttl := must(c.TTL(ctx, "s")).ok(t)
	if ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL after Set WithTTL(1m) = %v", ttl)
	}
	if v := must(c.Get(ctx, "s")).ok(t); v.ExpiresAt.IsZero() || time.Until(v.ExpiresAt) > time.Minute+time.Second {
		t.Fatalf("ExpiresAt = %v", v.ExpiresAt)
	}
	must(c.Set(ctx, "s", 13)).ok(t)
	if ttl := must(c.TTL(ctx, "s")).ok(t); ttl != client.NoTTL {
		t.Fatalf("TTL after plain Set = %v", ttl)
	}
}

func TestOverflowAndWrongKind(t *testing.T) {
	c, ctx := newClient(t)
	must(c.Set(ctx, "big", math.MaxInt64)).ok(t)
	_, err := c.Incr(ctx, "big", 1)
	wantCode(t, err, 422, client.CodeOverflow, client.ErrOverflow)
	if v := must(c.Get(ctx, "big")).ok(t); v.Value != math.MaxInt64 {
		t.Fatalf("value after overflow: %d", v.Value)
	}
	_, err = c.PFAdd(ctx, "big", "x")
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	_, err = c.HIncr(ctx, "big", map[string]int64{"f": 1})
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	_, err = c.Incr(ctx, "big", 1, client.WithKind(client.KindPN))
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	_, err = c.Incr(ctx, "x", 1, client.WithKind("nonsense"))
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
}

func TestDeleteExpirePersistTTL(t *testing.T) {
	c, ctx := newClient(t)
	if ok := must(c.Delete(ctx, "d")).ok(t); ok {
		t.Fatal("Delete of a missing counter reported true")
	}
	if ttl := must(c.TTL(ctx, "d")).ok(t); ttl != client.NoCounter {
		t.Fatalf("TTL of missing = %v", ttl)
	}
	if ok := must(c.Expire(ctx, "d", time.Minute)).ok(t); ok {
		t.Fatal("Expire of a missing counter reported true")
	}
	must(c.Incr(ctx, "d", 1)).ok(t)
	if ttl := must(c.TTL(ctx, "d")).ok(t); ttl != client.NoTTL {
		t.Fatalf("TTL without ttl = %v", ttl)
	}
	if ok := must(c.Expire(ctx, "d", time.Minute)).ok(t); !ok {
		t.Fatal("Expire reported false")
	}
	if ttl := must(c.TTL(ctx, "d")).ok(t); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL = %v", ttl)
	}
	if ok := must(c.Persist(ctx, "d")).ok(t); !ok {
		t.Fatal("Persist reported false")
	}
	if ttl := must(c.TTL(ctx, "d")).ok(t); ttl != client.NoTTL {
		t.Fatalf("TTL after Persist = %v", ttl)
	}
	if _, err := c.Expire(ctx, "d", 0); err == nil {
		t.Fatal("Expire(0): no error")
	}
	if ok := must(c.Delete(ctx, "d")).ok(t); !ok {
		t.Fatal("Delete reported false")
	}
	if v := must(c.Get(ctx, "d")).ok(t); v.Exists {
		t.Fatalf("after Delete: %+v", v)
	}
}

func TestHyperLogLog(t *testing.T) {
	c, ctx := newClient(t)
	r := must(c.PFAdd(ctx, "u:1", "a", "b", "c")).ok(t)
	if !r.Changed || r.ID != "u:1" {
		t.Fatalf("PFAdd: %+v", r)
	}
	if r := must(c.PFAdd(ctx, "u:1", "a")).ok(t); r.Changed {
		t.Fatalf("PFAdd of a known item: %+v", r)
	}
	must(c.PFAddWith(ctx, "u:2", []string{"c", "d"}, client.WithDurability("sync"))).ok(t)
	if e := must(c.PFCount(ctx, "u:1")).ok(t); e.Value != 3 || e.StdError <= 0 || e.StdError > 0.02 {
		t.Fatalf("PFCount: %+v", e)
	}
	if e := must(c.PFCount(ctx, "u:1", "u:2")).ok(t); e.Value != 4 {
		t.Fatalf("PFCount union: %+v", e)
	}
	if r := must(c.PFMerge(ctx, "u:all", "u:1", "u:2")).ok(t); r.Value != 4 {
		t.Fatalf("PFMerge: %+v", r)
	}
	v := must(c.Get(ctx, "u:all")).ok(t)
	if v.Kind != client.KindHLL || v.Value != 4 || v.Precision == 0 || v.StdError == 0 {
		t.Fatalf("Get hll: %+v", v)
	}
	if _, err := c.PFCount(ctx); err == nil {
		t.Fatal("PFCount(): no error")
	}
}

// TestPFAddEstimate: the contract says pfadd answers the new estimate in
// "value" (docs/http-api.md).
func TestPFAddEstimate(t *testing.T) {
	c, ctx := newClient(t)
	if r := must(c.PFAdd(ctx, "u", "a", "b", "c")).ok(t); r.Value != 3 {
		t.Errorf("PFAdd value = %d, want the estimate 3", r.Value)
	}
	if r := must(c.PFAdd(ctx, "u", "a")).ok(t); r.Value != 3 {
		t.Errorf("PFAdd (unchanged) value = %d, want the estimate 3", r.Value)
	}
	rs := must(c.Batch(ctx, []client.Op{client.PFAddOp("u2", "x", "y")})).ok(t)
	if rs[0].Value != 2 {
		t.Errorf("batch pfadd value = %d, want the estimate 2", rs[0].Value)
	}
}

func TestHash(t *testing.T) {
	c, ctx := newClient(t)
	got := must(c.HIncr(ctx, "post:1", map[string]int64{"views": 1, "likes": 2})).ok(t)
	if !maps.Equal(got, map[string]int64{"views": 1, "likes": 2}) {
		t.Fatalf("HIncr = %v", got)
	}
	if v := must(c.HIncrBy(ctx, "post:1", "views", 3)).ok(t); v != 4 {
		t.Fatalf("HIncrBy = %d", v)
	}
	v, ok, err := c.HGet(ctx, "post:1", "views")
	if err != nil || v != 4 || !ok {
		t.Fatalf("HGet = %d %v %v", v, ok, err)
	}
	v, ok, err = c.HGet(ctx, "post:1", "shares/x")
	if err != nil || v != 0 || ok {
		t.Fatalf("HGet missing field = %d %v %v", v, ok, err)
	}
	if all := must(c.HGetAll(ctx, "post:1")).ok(t); !maps.Equal(all, map[string]int64{"views": 4, "likes": 2}) {
		t.Fatalf("HGetAll = %v", all)
	}
	if ok := must(c.HDel(ctx, "post:1", "likes")).ok(t); !ok {
		t.Fatal("HDel reported false")
	}
	if ok := must(c.HDel(ctx, "post:1", "likes")).ok(t); ok {
		t.Fatal("second HDel reported true")
	}
	cv := must(c.Get(ctx, "post:1")).ok(t)
	if cv.Kind != client.KindHash || !maps.Equal(cv.Fields, map[string]int64{"views": 4}) {
		t.Fatalf("Get hash: %+v", cv)
	}
	if all := must(c.HGetAll(ctx, "nohash")).ok(t); len(all) != 0 || all == nil {
		t.Fatalf("HGetAll of missing = %#v", all)
	}
	if _, err := c.HIncr(ctx, "post:1", nil); err == nil {
		t.Fatal("HIncr without fields: no error")
	}
}

func TestWindow(t *testing.T) {
	c, ctx := newClient(t)
	spec := client.WindowSpec{Granularity: time.Second, Window: 10 * time.Second}
	for range 3 {
		must(c.WindowIncr(ctx, "hits", 2, spec)).ok(t)
	}
	w := must(c.Window(ctx, "hits")).ok(t)
	if w.Value != 6 || w.Granularity != time.Second || w.Window != 10*time.Second || w.Fixed || !w.Exists {
		t.Fatalf("Window: %+v", w)
	}
	var sum int64
	for _, b := range w.Buckets {
		if b.Start.IsZero() || time.Since(b.Start) > time.Minute {
			t.Fatalf("bucket start %v", b.Start)
		}
		sum += b.Count
	}
	if sum != 6 {
		t.Fatalf("buckets sum to %d: %+v", sum, w.Buckets)
	}
	// Incr adds to an existing window counter.
	if r := must(c.Incr(ctx, "hits", 1)).ok(t); r.Value != 7 || r.Kind != client.KindWindow {
		t.Fatalf("Incr on window: %+v", r)
	}
	v := must(c.Get(ctx, "hits")).ok(t)
	if v.Kind != client.KindWindow || v.Window == nil || v.Window.Granularity != time.Second || len(v.Buckets) == 0 {
		t.Fatalf("Get window: %+v", v)
	}
	_, err := c.Window(ctx, "hits-missing")
	if err != nil {
		t.Fatalf("Window of missing: %v", err)
	}
	must(c.Incr(ctx, "plain", 1)).ok(t)
	_, err = c.Window(ctx, "plain")
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
}

func TestShardedAndPN(t *testing.T) {
	c, ctx := newClient(t)
	for range 10 {
		must(c.Incr(ctx, "sh", 1, client.WithShards(4))).ok(t)
	}
	v := must(c.Get(ctx, "sh")).ok(t)
	if v.Kind != client.KindSharded || v.Value != 10 || len(v.Shards) != 4 {
		t.Fatalf("sharded: %+v", v)
	}
	must(c.Incr(ctx, "pn", 5, client.WithKind(client.KindPN))).ok(t)
	must(c.Decr(ctx, "pn", 2)).ok(t)
	v = must(c.Get(ctx, "pn")).ok(t)
	if v.Kind != client.KindPN || v.Value != 3 || len(v.Replicas) != 1 || v.Replicas[0].P != 5 || v.Replicas[0].N != 2 {
		t.Fatalf("pn: %+v", v)
	}
}

func TestAggregateAndList(t *testing.T) {
	c, ctx := newClient(t)
	must(c.Incr(ctx, "agg:a", 2)).ok(t)
	must(c.Incr(ctx, "agg:b", 3)).ok(t)
	must(c.Incr(ctx, "other", 10)).ok(t)
	a := must(c.Aggregate(ctx, "agg:")).ok(t)
	if a.Value != 5 || a.Count != 2 || a.Prefix != "agg:" {
		t.Fatalf("Aggregate: %+v", a)
	}
	if a := must(c.Aggregate(ctx, "")).ok(t); a.Value != 15 || a.Count != 3 {
		t.Fatalf("Aggregate all: %+v", a)
	}

	var want []string
	for i := range 25 {
		id := fmt.Sprintf("list:%02d", i)
		want = append(want, id)
		must(c.Incr(ctx, id, 1)).ok(t)
	}
	seen := map[string]int{}
	var cursor uint64
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("List does not end")
		}
		ids, next, err := c.List(ctx, "list:", cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 10 {
			t.Fatalf("List returned %d ids with limit 10", len(ids))
		}
		for _, id := range ids {
			seen[id]++
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	got := slices.Sorted(maps.Keys(seen))
	if !slices.Equal(got, want) {
		t.Fatalf("List ids = %v, want %v", got, want)
	}
	var all []string
	for id, err := range c.ListAll(ctx, "list:") {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	sort.Strings(all)
	if !slices.Equal(slices.Compact(all), want) {
		t.Fatalf("ListAll = %v", all)
	}
}

func TestBatch(t *testing.T) {
	c, ctx := newClient(t)
	must(c.Incr(ctx, "gone", 1)).ok(t)
	rs := must(c.Batch(ctx, []client.Op{
		client.IncrOp("b:1", 5),
		client.DecrOp("b:1", 2),
		client.SetOp("b:2", 7),
		client.HIncrOp("b:h", map[string]int64{"x": 1}),
		client.PFAddOp("b:u", "a", "b"),
		client.DeleteOp("gone"),
		client.ExpireOp("b:2", time.Hour),
		client.HDelOp("b:h", "x"),
		client.PFMergeOp("b:u2", "b:u"),
	}, client.WithDurability("sync"))).ok(t)
	if len(rs) != 9 {
		t.Fatalf("%d results", len(rs))
	}
	if rs[0].Value != 5 || rs[1].Value != 3 || rs[2].Value != 7 || rs[3].Fields["x"] != 1 ||
		!rs[4].Changed || !rs[5].Changed || !rs[6].Changed || !rs[7].Changed || rs[8].Value != 2 {
		t.Fatalf("results: %+v", rs)
	}
	if ttl := must(c.TTL(ctx, "b:2")).ok(t); ttl <= 0 {
		t.Fatalf("TTL after batch expire = %v", ttl)
	}

	// All or nothing: the failing op 1 undoes op 0.
	_, err := c.Batch(ctx, []client.Op{
		client.IncrOp("b:1", 100),
		{Type: client.OpSet, ID: "b:2", Value: 1, ExpectedVersion: new(uint64(12345))},
	})
	wantCode(t, err, 409, client.CodeVersionConflict, client.ErrVersionConflict)
	var ce *client.Error
	errors.As(err, &ce)
	if ce.Index != 1 {
		t.Fatalf("batch error index %d, want 1", ce.Index)
	}
	if v := must(c.Get(ctx, "b:1")).ok(t); v.Value != 3 {
		t.Fatalf("b:1 = %d after a failed batch, want 3", v.Value)
	}
	_, err = c.Batch(ctx, []client.Op{client.IncrOp("ok", 1), {Type: "bogus", ID: "x"}})
	if err == nil {
		t.Fatal("batch with an unknown op type: no error")
	}
	if rs, err := c.Batch(ctx, nil); err != nil || len(rs) != 0 {
		t.Fatalf("empty batch: %v %v", rs, err)
	}
}

func TestIdempotencyKey(t *testing.T) {
	c, ctx := newClient(t)
	r1 := must(c.Incr(ctx, "idem", 1, client.WithIdempotencyKey("k-1"))).ok(t)
	r2 := must(c.Incr(ctx, "idem", 1, client.WithIdempotencyKey("k-1"))).ok(t)
	if r1.Replayed || !r2.Replayed || r2.Value != 1 || r2.Version != r1.Version {
		t.Fatalf("first %+v, replay %+v", r1, r2)
	}
	if v := must(c.Get(ctx, "idem")).ok(t); v.Value != 1 {
		t.Fatalf("value %d after a replay, want 1", v.Value)
	}
	_, err := c.Incr(ctx, "idem", 2, client.WithIdempotencyKey("k-1"))
	wantCode(t, err, 422, client.CodeIdempotencyKeyReused, client.ErrIdempotencyKeyReused)
	// Without a key given, every call gets its own.
	must(c.Incr(ctx, "idem2", 1)).ok(t)
	if r := must(c.Incr(ctx, "idem2", 1)).ok(t); r.Value != 2 || r.Replayed {
		t.Fatalf("second Incr: %+v", r)
	}
}

func TestDurability(t *testing.T) {
	c, ctx := newClient(t, client.WithDefaultDurability("sync"))
	if r := must(c.Incr(ctx, "dur", 1)).ok(t); r.Value != 1 {
		t.Fatalf("Incr: %+v", r)
	}
	if r := must(c.Incr(ctx, "dur", 1, client.WithDurability("async"))).ok(t); r.Value != 2 {
		t.Fatalf("Incr async: %+v", r)
	}
	_, err := c.Incr(ctx, "dur", 1, client.WithDurability("eventually"))
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
}

// TestHeaders checks what the client sends: a key and the durability on
// mutations, neither on reads.
func TestHeaders(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	url := startServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Header.Clone())
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	c := must(client.New(url, client.WithUserAgent("test-agent"))).ok(t)
	ctx := t.Context()
	must(c.Incr(ctx, "h", 1, client.WithDurability("sync"))).ok(t)
	must(c.Incr(ctx, "h", 1)).ok(t)
	must(c.Get(ctx, "h")).ok(t)
	mu.Lock()
	defer mu.Unlock()
	k1, k2 := got[0].Get("Idempotency-Key"), got[1].Get("Idempotency-Key")
	if k1 == "" || k2 == "" || k1 == k2 {
		t.Fatalf("idempotency keys %q, %q", k1, k2)
	}
	if d := got[0].Get("Counterd-Durability"); d != "sync" {
		t.Fatalf("durability header %q", d)
	}
	if d := got[1].Get("Counterd-Durability"); d != "" {
		t.Fatalf("durability header without option %q", d)
	}
	if k := got[2].Get("Idempotency-Key"); k != "" {
		t.Fatalf("GET sent an idempotency key %q", k)
	}
	if ua := got[2].Get("User-Agent"); ua != "test-agent" {
		t.Fatalf("User-Agent %q", ua)
	}
}

// TestConcurrentUse shares one Client between goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	c, ctx := newClient(t)
	const workers, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := c.Incr(ctx, "hot", 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v := must(c.Get(ctx, "hot")).ok(t); v.Value != workers*each {
		t.Fatalf("value %d, want %d", v.Value, workers*each)
	}
}

func TestErrorMessages(t *testing.T) {
	e := &client.Error{Status: 409, Code: "version_conflict", Message: "expected 3, have 4", Index: -1}
	if got := e.Error(); got != "counterd: version_conflict: expected 3, have 4" {
		t.Errorf("Error() = %q", got)
	}
	e = &client.Error{Status: 502, Message: "Bad Gateway", Index: -1}
	if got := e.Error(); got != "counterd: http 502: Bad Gateway" {
		t.Errorf("Error() = %q", got)
	}
	if errors.Is(e, client.ErrInternal) || !e.Temporary() {
		t.Errorf("502 without a code: Is internal or not temporary")
	}
	if !errors.Is(&client.Error{Status: 503, Index: -1}, client.ErrUnavailable) {
		t.Error("503 without a code is not ErrUnavailable")
	}
	e = &client.Error{Status: 409, Code: "wrong_kind", Message: "m", Index: 2}
	if got := e.Error(); got != "counterd: wrong_kind: m (batch op 2)" || !errors.Is(e, client.ErrWrongKind) {
		t.Errorf("Error() = %q", got)
	}
}
