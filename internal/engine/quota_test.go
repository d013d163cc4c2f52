package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/glob"
	"github.com/counterd/counterd/internal/quota"
)

func quotaConfig(t testing.TB, text string) *quota.Config {
	t.Helper()
	c, err := quota.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// usageOf is the key count of quota name (namespace ns for the default).
func usageOf(e *Engine, name, ns string) int64 {
	for _, u := range e.Quotas() {
		if u.Quota == name && u.Namespace == ns {
			return u.Keys
		}
	}
	return 0
}

// countMatching counts the live ids matching pattern.
func countMatching(e *Engine, pattern string) int64 {
	var n int64
	var cur uint64
	for {
		ids, next := e.Scan(cur, "", 1000)
		for _, id := range ids {
			if glob.Match(pattern, id) {
				n++
			}
		}
		if next == 0 {
			return n
		}
		cur = next
	}
}

func TestQuotaMaxKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) {
		c.Clock = clk.Now
		c.Quotas = quotaConfig(t, "namespaces:\n  \"q:*\": {max_keys: 3}\n")
	})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:a", Delta: 1})
	mustApply(t, e, contract.Op{Type: contract.OpPFAdd, ID: "q:b", Items: [][]byte{[]byte("x")}})
	mustApply(t, e, contract.Op{Type: contract.OpSet, ID: "q:c", Value: 5, TTL: time.Minute})
	refused := []contract.Op{
		{Type: contract.OpAdd, ID: "q:d", Delta: 1},
		{Type: contract.OpAdd, ID: "q:d", Kind: contract.KindPN, Delta: 1},
		{Type: contract.OpAdd, ID: "q:d", Kind: contract.KindFloat, Float: "1.5"},
		{Type: contract.OpSet, ID: "q:d", Value: 1},
		{Type: contract.OpPFAdd, ID: "q:d", Items: [][]byte{[]byte("x")}},
		{Type: contract.OpPFMerge, ID: "q:d", Sources: []string{"q:b"}},
		{Type: contract.OpHAdd, ID: "q:d", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}},
		{Type: contract.OpHSet, ID: "q:d", Fields: []counter.FieldDelta{{Name: "f", Delta: 1}}},
	}
	for _, op := range refused {
		_, err := e.Apply(bg, op, contract.WriteOptions{})
		var qe *quota.ExceededError
		if !errors.Is(err, contract.ErrQuotaExceeded) || !errors.As(err, &qe) || qe.Quota != "q:*" || qe.Limit != "max_keys" || qe.Max != 3 {
			t.Fatalf("%v: error %v, want quota q:* max_keys 3", op.Type, err)
		}
		if mustGet(t, e, "q:d").Exists || e.Len() != 3 {
			t.Fatalf("%v: refused write changed state (len %d)", op.Type, e.Len())
		}
	}
	if v := mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:a", Delta: 1}).Value; v != 2 {
		t.Fatalf("add to an existing key: %d", v)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "other", Delta: 1}) // not under q:*
	// A batch that would pass the quota applies nothing.
	_, err := e.ApplyBatch(bg, []contract.Op{{Type: contract.OpDelete, ID: "q:a"}, {Type: contract.OpAdd, ID: "q:x", Delta: 1}, {Type: contract.OpAdd, ID: "q:y", Delta: 1}}, contract.WriteOptions{})
	if !errors.Is(err, contract.ErrQuotaExceeded) || !mustGet(t, e, "q:a").Exists || mustGet(t, e, "q:x").Exists {
		t.Fatalf("batch over the quota: %v", err)
	}
	if n := usageOf(e, "q:*", ""); n != 3 {
		t.Fatalf("usage %d after the refused batch, want 3", n)
	}
	// Deletes and expiry give room back.
	mustApply(t, e, contract.Op{Type: contract.OpDelete, ID: "q:a"})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:d", Delta: 1})
	clk.Advance(2 * time.Minute) // q:c expires
	e.expireDue()
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:e", Delta: 1})
	if n, want := usageOf(e, "q:*", ""), countMatching(e, "q:*"); n != 3 || want != 3 {
		t.Fatalf("usage %d, %d keys: want 3", n, want)
	}
}

func TestQuotaHashFields(t *testing.T) {
	e := openMem(t, func(c *Config) {
		c.Quotas = quotaConfig(t, "namespaces:\n  \"h:*\": {max_hash_fields: 3}\n")
	})
	fd := func(names ...string) []counter.FieldDelta {
		var fs []counter.FieldDelta
		for _, n := range names {
			fs = append(fs, counter.FieldDelta{Name: n, Delta: 1})
		}
		return fs
	}
	mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "h:1", Fields: fd("a", "b", "a")})
	mustApply(t, e, contract.Op{Type: contract.OpHSet, ID: "h:1", Fields: fd("c")})
	for _, op := range []contract.Op{
		{Type: contract.OpHAdd, ID: "h:1", Fields: fd("a", "d")},
		{Type: contract.OpHSet, ID: "h:1", Fields: fd("d")},
		{Type: contract.OpHAdd, ID: "h:2", Fields: fd("a", "b", "c", "d")},
	} {
		_, err := e.Apply(bg, op, contract.WriteOptions{})
		var qe *quota.ExceededError
		if !errors.As(err, &qe) || qe.Limit != "max_hash_fields" || qe.Max != 3 {
			t.Fatalf("%v %s: error %v, want max_hash_fields 3", op.Type, op.ID, err)
		}
	}
	if v := mustGet(t, e, "h:1"); len(v.Fields) != 3 || v.Fields[0].Value != 2 {
		t.Fatalf("refused writes changed the hash: %+v", v.Fields)
	}
	if mustGet(t, e, "h:2").Exists {
		t.Fatal("refused hash created")
	}
	mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "h:1", Fields: fd("a", "b", "c")}) // existing fields
	mustApply(t, e, contract.Op{Type: contract.OpHDel, ID: "h:1", Names: []string{"a"}})
	mustApply(t, e, contract.Op{Type: contract.OpHAdd, ID: "h:1", Fields: fd("d")})
}

func TestQuotaDefaultPerNamespace(t *testing.T) {
	e := openMem(t, func(c *Config) {
		c.Quotas = quotaConfig(t, "namespaces:\n  \"big:*\": {max_keys: 5}\ndefault: {max_keys: 2}\n")
	})
	for _, id := range []string{"a:1", "a:2", "b:1", "b:2", "x", "y", "big:1", "big:2", "big:3"} {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1})
	}
	for _, id := range []string{"a:3", "b:3", "z"} {
		_, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}, contract.WriteOptions{})
		var qe *quota.ExceededError
		if !errors.As(err, &qe) || qe.Quota != quota.DefaultName || qe.Namespace != quota.Namespace(id) {
			t.Fatalf("%s: error %v, want the default of its namespace", id, err)
		}
	}
	if n := usageOf(e, "default", "a"); n != 2 {
		t.Fatalf("default usage of a: %d", n)
	}
}

// TestQuotaConcurrentCreates: creations racing for the last room never
// pass max_keys, and the count stays exact while deletes race them.
func TestQuotaConcurrentCreates(t *testing.T) {
	e := openMem(t, func(c *Config) {
		c.Quotas = quotaConfig(t, "namespaces:\n  \"c:*\": {max_keys: 50}\n")
	})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				_, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("c:%d:%d", g, i), Delta: 1}, contract.WriteOptions{})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, contract.ErrQuotaExceeded):
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 || countMatching(e, "c:*") != 50 || usageOf(e, "c:*", "") != 50 {
		t.Fatalf("%d created, %d exist, usage %d: want 50", ok.Load(), countMatching(e, "c:*"), usageOf(e, "c:*", ""))
	}
}

// TestQuotaReloadKeepsCounts: a reload recounts every key while writes
// create and delete keys, and the counts it ends with are exact.
func TestQuotaReloadKeepsCounts(t *testing.T) {
	e := openMem(t, func(c *Config) {
		c.Quotas = quotaConfig(t, "namespaces:\n  \"r:*\": {max_keys: 100000}\n")
	})
	for i := range 3000 {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("r:%d", i), Delta: 1})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("r:%d", (i*7+g*1000)%4000)
				op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1}
				if i%2 == 1 {
					op = contract.Op{Type: contract.OpDelete, ID: id}
				}
				if _, err := e.Apply(bg, op, contract.WriteOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	files := []string{
		"namespaces:\n  \"r:1*\": {max_keys: 100000}\n  \"r:*\": {max_keys: 100000}\n",
		"namespaces:\n  \"r:*\": {max_keys: 200000}\n",
		"default: {max_keys: 100000}\n",
		"namespaces:\n  \"r:*\": {max_keys: 100000}\n",
	}
	for _, f := range files {
		e.SetQuotas(quotaConfig(t, f))
	}
	close(stop)
	wg.Wait()
	if n, want := usageOf(e, "r:*", ""), countMatching(e, "r:*"); n != want {
		t.Fatalf("usage %d after reloads, %d keys", n, want)
	}
	e.SetQuotas(quotaConfig(t, files[0]))
	if a, b, want := usageOf(e, "r:1*", ""), usageOf(e, "r:*", ""), countMatching(e, "r:*"); a != countMatching(e, "r:1*") || a+b != want {
		t.Fatalf("usage r:1* %d + r:* %d, want %d keys", a, b, want)
	}
}

// TestQuotaRestart: counts are rebuilt from the stored keys at Open, so
// they are exact after a restart.
func TestQuotaRestart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Quotas = quotaConfig(t, "namespaces:\n  \"q:*\": {max_keys: 4}\n")
	e := mustOpen(t, cfg)
	for i := range 4 {
		mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("q:%d", i), Delta: 1})
	}
	mustApply(t, e, contract.Op{Type: contract.OpDelete, ID: "q:0"})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, cfg)
	if n := usageOf(e, "q:*", ""); n != 3 {
		t.Fatalf("usage after restart %d, want 3", n)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:new", Delta: 1})
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "q:more", Delta: 1}, contract.WriteOptions{}); !errors.Is(err, contract.ErrQuotaExceeded) {
		t.Fatalf("after restart: %v, want the quota refused", err)
	}
}

// TestQuotaCrash: after a power loss the counts are those of the keys
// that survived (counted from them at Open), whatever the unsynced writes
// counted before.
func TestQuotaCrash(t *testing.T) {
	fs := vfs.NewStrictMem()
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.FlushInterval = "/data", fs, time.Hour
	cfg.Quotas = quotaConfig(t, "namespaces:\n  \"q:*\": {max_keys: 5}\n")
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	root.Sync()
	root.Close()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: fmt.Sprintf("q:%d", i), Delta: 1}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
			t.Fatal(err)
		}
	}
	fs.SetIgnoreSyncs(true) // the crash: nothing from here on is durable
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:lost1", Delta: 1})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:lost2", Delta: 1})
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "q:lost3", Delta: 1}, contract.WriteOptions{}); !errors.Is(err, contract.ErrQuotaExceeded) {
		t.Fatalf("6th key before the crash: %v", err)
	}
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	defer e.Close()
	if n, keys := usageOf(e, "q:*", ""), countMatching(e, "q:*"); n != 3 || keys != 3 {
		t.Fatalf("after the crash: usage %d, %d keys; want 3", n, keys)
	}
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:a", Delta: 1})
	mustApply(t, e, contract.Op{Type: contract.OpAdd, ID: "q:b", Delta: 1})
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "q:c", Delta: 1}, contract.WriteOptions{}); !errors.Is(err, contract.ErrQuotaExceeded) {
		t.Fatalf("6th key after the crash: %v", err)
	}
}

// TestExpireHook: the expire hook hears of each counter the engine
// deletes because its TTL passed, once, by the janitor or by the access
// that finds it expired, and of no delete.
func TestExpireHook(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e := openMem(t, func(c *Config) { c.Clock = clk.Now })
	var mu sync.Mutex
	var heard []string
	e.SetExpireHook(func(id string) { mu.Lock(); heard = append(heard, id); mu.Unlock() })
	for _, id := range []string{"a", "b", "c"} {
		if _, err := e.Apply(bg, contract.Op{Type: contract.OpSet, ID: id, Value: 1, TTL: time.Minute}, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpDelete, ID: "c"}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpAdd, ID: "a", Delta: 1}, contract.WriteOptions{}); err != nil { // found expired on access
		t.Fatal(err)
	}
	e.expireDue() // the janitor: b
	e.expireDue()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(heard)
	if !slices.Equal(heard, []string{"a", "b"}) {
		t.Errorf("expire hook heard %q, want [a b]", heard)
	}
}
