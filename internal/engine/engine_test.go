package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/glob"
)

var bg = context.Background()

func openMem(t testing.TB, mod ...func(*Config)) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "n1"
	for _, m := range mod {
		m(&cfg)
	}
	return mustOpen(t, cfg)
}

// mustOpen opens an engine that the test closes when it ends.
func mustOpen(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// fakeClock is a settable clock for TTL and window tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustApply(t *testing.T, e *Engine, op contract.Op) contract.Result {
	t.Helper()
	r, err := e.Apply(bg, op, contract.WriteOptions{})
	if err != nil {
		t.Fatalf("%v %q: %v", op.Type, op.ID, err)
	}
	return r
}

func mustGet(t *testing.T, e *Engine, id string) contract.View {
	t.Helper()
	v, err := e.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCounterAddGetSet(t *testing.T) {
	e := openMem(t)
	if v := mustGet(t, e, "missing"); v.Exists || v.Value != 0 {
		t.Fatalf("missing counter: %+v", v)
	}
	r := mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "page_views:article_123", Delta: 1})
	if r.Value != 1 || r.Version != 1 || r.Kind != contract.KindCounter {
		t.Fatalf("first add: %+v", r)
	}
	r = mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "page_views:article_123", Delta: -5})
	if r.Value != -4 || r.Version != 2 {
		t.Fatalf("second add: %+v", r)
	}
	_, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: "page_views:article_123", Value: 7, CheckVersion: true, ExpectedVersion: 1}, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrVersionConflict) {
		t.Fatalf("stale set: %v", err)
	}
	r = mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "page_views:article_123", Value: 7, CheckVersion: true, ExpectedVersion: 2})
	if r.Value != 7 || r.Version != 3 {
		t.Fatalf("set: %+v", r)
	}
	v := mustGet(t, e, "page_views:article_123")
	if v.Value != 7 || v.Version != 3 || v.UpdatedAt.IsZero() {
		t.Fatalf("get: %+v", v)
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: "new", Value: 1, CheckVersion: true, ExpectedVersion: 0}, contract.WriteOptions{}); err != nil {
		t.Fatalf("create with expected version 0: %v", err)
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: "new", Value: 1, CheckVersion: true, ExpectedVersion: 0}, contract.WriteOptions{}); !errors.Is(err, contract.ErrVersionConflict) {
		t.Fatalf("second create with expected version 0: %v", err)
	}
}

func TestSetModes(t *testing.T) {
	e := openMem(t)
	if r := mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: 5, SetMode: contract.SetIfExists}); r.Changed {
		t.Fatal("XX on a missing key applied")
	}
	if r := mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: 5, SetMode: contract.SetIfAbsent}); !r.Changed {
		t.Fatal("NX on a missing key did not apply")
	}
	if r := mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: 9, SetMode: contract.SetIfAbsent}); r.Changed || mustGet(t, e, "k").Value != 5 {
		t.Fatal("NX on an existing key applied")
	}
}

func TestOverflowLeavesValue(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: math.MaxInt64})
	for _, d := range []int64{1, math.MaxInt64} {
		if _, err := e.Add(bg, "k", d, contract.WriteOptions{}); !errors.Is(err, contract.ErrOverflow) {
			t.Fatalf("add %d: %v", d, err)
		}
	}
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "m", Value: math.MinInt64})
	if _, err := e.Add(bg, "m", -1, contract.WriteOptions{}); !errors.Is(err, contract.ErrOverflow) {
		t.Fatalf("underflow: %v", err)
	}
	if v := mustGet(t, e, "k"); v.Value != math.MaxInt64 || v.Version != 1 {
		t.Fatalf("value changed by a failed add: %+v", v)
	}
	// A failed first add must not leave a counter behind.
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindSharded, Shards: 2000}, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("too many shards: %v", err)
	}
	if mustGet(t, e, "w").Exists {
		t.Fatal("failed create left a counter")
	}
}

func TestInvalidIDs(t *testing.T) {
	e := openMem(t)
	for _, id := range []string{"", string(make([]byte, 256)), "a\x00b", "bad\xffutf8", "tab\there"} {
		if _, err := e.Add(bg, id, 1, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidID) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	if e.Len() != 0 {
		t.Fatalf("invalid ids created %d counters", e.Len())
	}
	long := string(make([]byte, 255))
	for i := range []byte(long) {
		_ = i
	}
	ok := ""
	for len(ok) < 255 {
		ok += "x"
	}
	if _, err := e.Add(bg, ok, 1, contract.WriteOptions{}); err != nil {
		t.Fatalf("255-byte id: %v", err)
	}
}

func TestWrongKind(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "c", Delta: 3})
	mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "views", Delta: 1}}})
	cases := []contract.Op{
		{Type: contract.OpHAdd, ID: "c", Fields: []counter.FieldDelta{{Name: "x", Delta: 1}}},
		{Type: contract.OpPFAdd, ID: "c", Items: [][]byte{[]byte("u")}},
		{Type: contract.OpAdd, ID: "h", Delta: 1},
		{Type: contract.OpSet, ID: "h", Value: 1},
		{Type: contract.OpAdd, ID: "c", Kind: contract.KindPN, Delta: 1},
		{Type: contract.OpPFMerge, ID: "x", Sources: []string{"c"}},
	}
	for _, op := range cases {
		if _, err := e.Apply(bg, op, contract.WriteOptions{}); !errors.Is(err, contract.ErrWrongKind) {
			t.Errorf("%v on %q: %v", op.Type, op.ID, err)
		}
	}
	if v := mustGet(t, e, "c"); v.Value != 3 || v.Version != 1 {
		t.Fatalf("c changed: %+v", v)
	}
	if mustGet(t, e, "x").Exists {
		t.Fatal("failed pfmerge created its destination")
	}
}

func TestKinds(t *testing.T) {
	e := openMem(t)
	for i := 0; i < 10; i++ {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Shards: 4, Delta: 2})
	}
	v := mustGet(t, e, "s")
	if v.Kind != contract.KindSharded || v.Value != 20 || len(v.Shards) != 4 {
		t.Fatalf("sharded: %+v", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: 5})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "p", Delta: -2})
	v = mustGet(t, e, "p")
	if v.Kind != contract.KindPN || v.Value != 3 || len(v.Replicas) != 1 || v.Replicas[0].Replica != "n1" {
		t.Fatalf("pn: %+v", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a"), []byte("b"), []byte("a")}})
	if n, se, err := e.PFCount("u"); err != nil || n != 2 || se <= 0 {
		t.Fatalf("pfcount: %d %v %v", n, se, err)
	}
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "u2", Items: [][]byte{[]byte("c")}})
	if n, _, _ := e.PFCount("u", "u2", "nope"); n != 3 {
		t.Fatalf("pfcount union: %d", n)
	}
	r := mustApply(t, e, contract.Op{Type: contract.OpPFMerge, ID: "all", Sources: []string{"u", "u2"}})
	if r.Value != 3 {
		t.Fatalf("pfmerge: %+v", r)
	}
	r = mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "views", Delta: 1}, {Name: "likes", Delta: 2}}})
	if len(r.Fields) != 2 {
		t.Fatalf("hadd: %+v", r)
	}
	if x, ok, _ := e.HGet("h", "likes"); !ok || x != 2 {
		t.Fatalf("hget: %d %v", x, ok)
	}
	r = mustApply(t, e, contract.Op{Type: contract.OpHDel, ID: "h", Names: []string{"views", "likes"}})
	if r.Value != 2 || mustGet(t, e, "h").Exists {
		t.Fatalf("hdel of every field must delete the hash: %+v", r)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Second, Span: 300 * time.Second}, Delta: 4})
	v = mustGet(t, e, "w")
	if v.Kind != contract.KindWindow || v.Value != 4 || v.Window.Span != 300*time.Second {
		t.Fatalf("window: %+v", v)
	}
	a, err := e.Aggregate("")
	if err != nil || a.Value != 20+3+4 || a.Count != 3 {
		t.Fatalf("aggregate: %+v %v", a, err)
	}
}

func TestTTL(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 1})
	if _, has, ok := e.TTL("k"); !ok || has {
		t.Fatal("no ttl expected")
	}
	mustApply(t, e, contract.Op{Type: contract.OpExpire, ID: "k", TTL: 10 * time.Second})
	if ttl, has, _ := e.TTL("k"); !has || ttl != 10*time.Second {
		t.Fatalf("ttl %v", ttl)
	}
	clk.Advance(9 * time.Second)
	if !mustGet(t, e, "k").Exists {
		t.Fatal("expired early")
	}
	clk.Advance(time.Second)
	if mustGet(t, e, "k").Exists || e.Len() != 0 {
		t.Fatal("did not expire")
	}
	r := mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "k", Delta: 1})
	if r.Value != 1 || r.Version != 1 {
		t.Fatalf("recreated counter: %+v", r)
	}
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "k", Value: 3, TTL: time.Second})
	mustApply(t, e, contract.Op{Type: contract.OpExpire, ID: "k", TTL: 0})
	clk.Advance(time.Hour)
	if !mustGet(t, e, "k").Exists {
		t.Fatal("persisted counter expired")
	}
}

func TestHotKeyConcurrent(t *testing.T) {
	e := openMem(t)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := e.Add(bg, "hot", 1, contract.WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					e.Add(bg, fmt.Sprintf("cold:%d:%d", w, i), 1, contract.WriteOptions{})
					e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: fmt.Sprintf("cold:%d:%d", w, i-100)}, contract.WriteOptions{})
				}
			}
		}(w)
	}
	wg.Wait()
	if v := mustGet(t, e, "hot"); v.Value != workers*each || v.Version != workers*each {
		t.Fatalf("hot = %+v", v)
	}
}

func TestBatchAtomic(t *testing.T) {
	e := openMem(t)
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "full", Value: math.MaxInt64})
	_, err := e.ApplyBatch(bg, []contract.Op{
		{Type: contract.OpAdd, ID: "a", Delta: 1},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}},
		{Type: contract.OpAdd, ID: "full", Delta: 1},
	}, contract.WriteOptions{})
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, contract.ErrOverflow) {
		t.Fatalf("batch error: %v", err)
	}
	if mustGet(t, e, "a").Exists || mustGet(t, e, "h").Exists {
		t.Fatal("failed batch left partial writes")
	}
	res, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "a", Delta: 1}, {Type: contract.OpAdd, ID: "a", Delta: 2}, {Type: contract.OpDelete, ID: "full"}}, contract.WriteOptions{})
	if err != nil || res[1].Value != 3 || !res[2].Changed {
		t.Fatalf("batch: %+v %v", res, err)
	}
	if _, err := e.ApplyBatch(bg, make([]contract.Op, 1001), contract.WriteOptions{}); !errors.Is(err, contract.ErrBatchTooLarge) {
		t.Fatalf("large batch: %v", err)
	}
}

func TestScanAndGlob(t *testing.T) {
	e := openMem(t)
	want := map[string]bool{}
	for i := 0; i < 500; i++ {
		id := fmt.Sprintf("user:%d", i)
		want[id] = true
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "other", Delta: 1})
	got := map[string]bool{}
	var cur uint64
	for {
		ids, next := e.Scan(cur, "user:*", 37)
		for _, id := range ids {
			if got[id] {
				t.Fatalf("%s returned twice", id)
			}
			got[id] = true
		}
		if next == 0 {
			break
		}
		cur = next
	}
	if len(got) != len(want) {
		t.Fatalf("scan returned %d ids, want %d", len(got), len(want))
	}
	for _, c := range []struct {
		p, s string
		ok   bool
	}{{"*", "x", true}, {"a?c", "abc", true}, {"a[bc]d", "acd", true}, {"a[^b]d", "abd", false}, {"[a-c]*", "cat", true}, {`a\*`, "a*", true}, {`a\*`, "ab", false}, {"*:*:*", "a:b", false}, {"a*b*c", "aXbYc", true}} {
		if glob.Match(c.p, []byte(c.s)) != c.ok {
			t.Errorf("glob.Match(%q, %q) != %v", c.p, c.s, c.ok)
		}
	}
}

func TestIdempotency(t *testing.T) {
	dir := t.TempDir()
	open := func() *Engine {
		cfg := DefaultConfig()
		cfg.Dir = dir
		cfg.IdempotencyMemory = 2
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	wo := contract.WriteOptions{IdempotencyKey: "req-1"}
	r1, err := e.Add(bg, "k", 5, wo)
	if err != nil || r1.Replayed {
		t.Fatal(r1, err)
	}
	r2, err := e.Add(bg, "k", 5, wo)
	if err != nil || !r2.Replayed || r2.Value != 5 || r2.Version != r1.Version {
		t.Fatalf("retry: %+v %v", r2, err)
	}
	if _, err := e.Add(bg, "k", 6, wo); !errors.Is(err, contract.ErrIdempotencyReuse) {
		t.Fatalf("reuse with another request: %v", err)
	}
	// Push req-1 out of memory: it must still be found on disk.
	for i := 0; i < 5; i++ {
		e.Add(bg, "other", 1, contract.WriteOptions{IdempotencyKey: fmt.Sprint("fill-", i)})
	}
	e.Flush(bg)
	e.Add(bg, "other", 1, contract.WriteOptions{IdempotencyKey: "fill-x"})
	if r, err := e.Add(bg, "k", 5, wo); err != nil || !r.Replayed {
		t.Fatalf("retry after eviction: %+v %v", r, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open()
	defer e.Close()
	if r, err := e.Add(bg, "k", 5, wo); err != nil || !r.Replayed || r.Value != 5 {
		t.Fatalf("retry after restart: %+v %v", r, err)
	}
	if v := mustGet(t, e, "k"); v.Value != 5 {
		t.Fatalf("k = %d after retries, want 5", v.Value)
	}
	// Concurrent retries of one key apply once.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "c", Delta: 1}, {Type: contract.OpAdd, ID: "d", Delta: 1}}, contract.WriteOptions{IdempotencyKey: "batch-1"})
		}()
	}
	wg.Wait()
	if mustGet(t, e, "c").Value != 1 || mustGet(t, e, "d").Value != 1 {
		t.Fatal("concurrent retries applied more than once")
	}
}

func TestIdempotencyRetention(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now; c.IdempotencyRetention = time.Hour })
	wo := contract.WriteOptions{IdempotencyKey: "k1"}
	e.Add(bg, "k", 1, wo)
	clk.Advance(2 * time.Hour)
	if r, _ := e.Add(bg, "k", 1, wo); r.Replayed || r.Value != 2 {
		t.Fatalf("a key past its retention must apply again: %+v", r)
	}
}

// TestRestartRecovers checks that every kind, TTL and deletion survive a
// clean restart.
func TestRestartRecovers(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Dir = dir
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ops := []contract.Op{
		{Type: contract.OpAdd, ID: "c", Delta: 42},
		{Type: contract.OpAdd, ID: "s", Kind: contract.KindSharded, Delta: 7},
		{Type: contract.OpAdd, ID: "p", Kind: contract.KindPN, Delta: -3},
		{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("a"), []byte("b")}},
		{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "f", Delta: 9}}},
		{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow, Window: counter.WindowSpec{Granularity: time.Hour, Span: 24 * time.Hour}, Delta: 2},
		{Type: contract.OpAdd, ID: "gone", Delta: 1},
		{Type: contract.OpExpire, ID: "c", TTL: time.Hour},
	}
	for _, op := range ops {
		if _, err := e.Apply(bg, op, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.Flush(bg)
	e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: "gone"}, contract.WriteOptions{})
	before := map[string]contract.View{}
	for _, id := range []string{"c", "s", "p", "u", "h", "w"} {
		before[id] = mustGet(t, e, id)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for id, b := range before {
		a := mustGet(t, e, id)
		if a.Kind != b.Kind || a.Value != b.Value || a.Version != b.Version || !a.ExpiresAt.Equal(b.ExpiresAt) {
			t.Errorf("%s: before %+v after %+v", id, b, a)
		}
	}
	if mustGet(t, e, "gone").Exists || e.Len() != 6 {
		t.Fatalf("deleted counter came back (len %d)", e.Len())
	}
}

// TestCrashKeepsSyncWrites simulates power loss with Pebble's strict
// in-memory filesystem: whatever was not fsynced is thrown away.
func TestCrashKeepsSyncWrites(t *testing.T) {
	fs := vfs.NewStrictMem()
	cfg := DefaultConfig()
	cfg.Dir = "/data"
	cfg.FS = fs
	cfg.FlushInterval = time.Hour // no timer flush: only sync writes reach disk
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	root.Sync() // make /data itself durable
	root.Close()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := e.Add(bg, "sync", 1, contract.WriteOptions{Durability: contract.Sync}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	e.Add(bg, "async", 1, contract.WriteOptions{Durability: contract.Async})
	fs.SetIgnoreSyncs(true) // the crash: nothing from here on is durable
	e.Add(bg, "sync", 1000, contract.WriteOptions{Durability: contract.Async})
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	defer e.Close()
	if v := mustGet(t, e, "sync"); v.Value != 400 {
		t.Fatalf("after crash sync = %d, want the 400 acknowledged sync increments", v.Value)
	}
	st := e.Stats()
	if st.Flushes > 0 {
		t.Logf("flushes after reopen: %d", st.Flushes)
	}
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"page_views:article_123", "", "a\x00", "ünïcødé:ok", "\x7f", "abcdefgh\x1fabc", "\xc2\x80", "abcdefghijklmnop~", "\uFFFD", "x\xff", "abcdefghi\x01", "abcdefghijk\x7f", "abcdefghijklmnopq\xc3\xa9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		// Reference: the plain definition, rune by rune.
		want := len(id) > 0 && len(id) <= contract.MaxIDLen && utf8.ValidString(id)
		for _, r := range id {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				want = false
			}
		}
		if got := contract.ValidateID(id) == nil; got != want {
			t.Fatalf("ValidateID(%q) ok=%v, want %v", id, got, want)
		}
	})
}
