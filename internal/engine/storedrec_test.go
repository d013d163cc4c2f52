package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
)

// TestStoredRecordsWithMergedStateCrashTogether: a stored record must reach
// disk in the same batch as the state merged before it (MergeRecords). A
// peer's pn slot grows by one per merge, each merge stores the record
// "rec-<slot value>"; the disk loses power at an arbitrary point. After
// reopening, the slot's value v on disk must come with exactly the records
// rec-1..rec-v: a missing one is a state on disk without its record, one
// above v a record without its state.
func TestStoredRecordsWithMergedStateCrashTogether(t *testing.T) {
	for round := 0; round < 3; round++ {
		fs := strictMemDir(t, "/data")
		cfg := DefaultConfig()
		cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "a"
		cfg.FlushInterval = time.Millisecond
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		peer := openMem(t, func(c *Config) { c.NodeID = "b" })
		n := 0
		for ; n < 200*(round+1); n++ {
			if _, err := peer.Add(bg, "x", 1, contract.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			st := mustExport(t, peer, "x")
			key := fmt.Sprintf("rec-%d", n+1)
			wo := contract.WriteOptions{Durability: contract.Async}
			if n == 50*(round+1) {
				wo.Durability = contract.Sync // something reaches disk for sure
			}
			if n%10 == 0 {
				time.Sleep(200 * time.Microsecond) // let flushes interleave
			}
			if _, err := e.MergeRecords(bg, []State{st}, wo, func() []StoredRecord {
				return []StoredRecord{{Key: key, Created: time.Now().UnixNano(), Data: []byte(key)}}
			}); err != nil {
				t.Fatal(err)
			}
			if n == 100*(round+1) {
				fs.SetIgnoreSyncs(true) // power loss: nothing from here on is durable
			}
		}
		v := reopenAndCheckRecords(t, e, fs, cfg, round)
		t.Logf("round %d: %d of %d merges on disk with their records", round, v, n)
	}
}

// TestStoredRecords: records survive a restart, a nil Data deletes, the
// since filter and the retention purge drop old ones, and a bad key is an
// invalid argument that stores nothing.
func TestStoredRecords(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	e := openNode(t, "a", dir, clk, func(c *Config) { c.IdempotencyRetention = time.Hour })
	old := clk.Now().UnixNano()
	put := func(recs ...StoredRecord) {
		t.Helper()
		if _, err := e.MergeRecords(bg, nil, contract.WriteOptions{Durability: contract.Sync}, func() []StoredRecord { return recs }); err != nil {
			t.Fatal(err)
		}
	}
	put(StoredRecord{Key: "old", Created: old, Data: []byte("o")}, StoredRecord{Key: "gone", Created: old, Data: []byte("g")})
	clk.Advance(50 * time.Minute)
	now := clk.Now().UnixNano()
	put(StoredRecord{Key: "new", Created: now, Data: []byte("n")}, StoredRecord{Key: "gone"})
	if _, err := e.MergeRecords(bg, nil, contract.WriteOptions{}, func() []StoredRecord { return []StoredRecord{{Key: "", Data: []byte("x")}} }); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Fatalf("empty key: %v, want invalid argument", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openNode(t, "a", dir, clk, func(c *Config) { c.IdempotencyRetention = time.Hour })
	list := func(since int64) string {
		t.Helper()
		var got []string
		if err := e.StoredRecords(since, func(r StoredRecord) { got = append(got, fmt.Sprintf("%s=%s@%d", r.Key, r.Data, r.Created)) }); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	if got, want := list(0), fmt.Sprintf("new=n@%d,old=o@%d", now, old); got != want {
		t.Fatalf("after restart: %s, want %s", got, want)
	}
	if got, want := list(now), fmt.Sprintf("new=n@%d", now); got != want {
		t.Fatalf("since %d: %s, want %s", now, got, want)
	}
	clk.Advance(20 * time.Minute) // old is 70 minutes old, past the retention
	if err := e.purgeIdempotency(); err != nil {
		t.Fatal(err)
	}
	if got, want := list(0), fmt.Sprintf("new=n@%d", now); got != want {
		t.Fatalf("after the purge: %s, want %s", got, want)
	}
}

// reopenAndCheckRecords reopens e after a power loss and checks that x's
// value v on disk came with exactly the stored records rec-1..rec-v, and
// that v is past the synced write of the round (its 50*(round+1)+1th).
// It returns v.
func reopenAndCheckRecords(t *testing.T, e *Engine, fs *vfs.MemFS, cfg Config, round int) int64 {
	t.Helper()
	e = reopenAfterPowerLoss(t, e, fs, cfg)
	defer e.Close()
	var v int64
	if _, ok, err := e.Export("x"); err != nil {
		t.Fatal(err)
	} else if ok {
		v = mustGet(t, e, "x").Value
	}
	seen := map[int64]bool{}
	if err := e.StoredRecords(0, func(r StoredRecord) {
		k, err := strconv.ParseInt(strings.TrimPrefix(r.Key, "rec-"), 10, 64)
		if err != nil || string(r.Data) != r.Key {
			t.Errorf("stored record %q = %q", r.Key, r.Data)
		}
		seen[k] = true
	}); err != nil {
		t.Fatal(err)
	}
	for k := int64(1); k <= v; k++ {
		if !seen[k] {
			t.Fatalf("round %d: value %d on disk but record rec-%d missing", round, v, k)
		}
	}
	if int64(len(seen)) != v {
		t.Fatalf("round %d: %d records on disk for value %d", round, len(seen), v)
	}
	if v <= int64(50*(round+1)) {
		t.Fatalf("round %d: value %d on disk, below the synced write %d", round, v, 50*(round+1)+1)
	}
	return v
}
