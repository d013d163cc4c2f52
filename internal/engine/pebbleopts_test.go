package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// The engine's Pebble options pass Pebble's own checks.
func TestPebbleOptionsValid(t *testing.T) {
	opts := pebbleOptions(DefaultConfig(), nil).EnsureDefaults()
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	if opts.MemTableSize != memTableSize || opts.L0CompactionThreshold != l0CompactionThreshold {
		t.Fatalf("options not kept: memtable %d, L0 threshold %d", opts.MemTableSize, opts.L0CompactionThreshold)
	}
}

// A memory budget's memtable size reaches Pebble; sizes outside
// MinMemTableSize..32 MiB are refused.
func TestPebbleMemTableSizeOption(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MemTableSize = 8 << 20
	if got := pebbleOptions(cfg, nil).MemTableSize; got != 8<<20 {
		t.Fatalf("MemTableSize %d reached Pebble as %d", cfg.MemTableSize, got)
	}
	for _, bad := range []uint64{1, MinMemTableSize - 1, memTableSize + 1} {
		cfg.MemTableSize = bad
		if err := cfg.Validate(); err == nil {
			t.Errorf("MemTableSize %d accepted", bad)
		}
	}
	cfg.MemTableSize = MinMemTableSize
	if err := cfg.Validate(); err != nil {
		t.Errorf("MemTableSize %d refused: %v", cfg.MemTableSize, err)
	}
}

// Bigger memtables cost an idle or lightly written engine nothing: Pebble
// starts with a small memtable and doubles it only when one fills.
func TestPebbleMemtableStartsSmall(t *testing.T) {
	e := openMem(t)
	for i := range 1000 {
		if _, err := e.Add(bg, fmt.Sprintf("page_views:art_%09d", i), 1, contract.WriteOptions{Durability: contract.Sync}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.db.Metrics().MemTable.Size; got > 1<<20 || got >= memTableSize {
		t.Fatalf("memtables hold %d bytes after 1000 small writes, want at most 1 MB", got)
	}
}

// A stream of new counters is flushed before the flush interval once a
// shard holds dirtyKick changes: with an interval of an hour, writing more
// counters than numShards x (dirtyKick-1) (so some shard must reach
// dirtyKick) leaves fewer of them dirty soon after.
func TestDirtyShardFlushesEarly(t *testing.T) {
	e := openMem(t, func(c *Config) { c.FlushInterval = time.Hour })
	n := numShards*dirtyKick + 1000
	for i := range n {
		if _, err := e.Add(bg, fmt.Sprintf("bulk:%d", i), 1, contract.WriteOptions{Durability: contract.Async}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "an early flush", func() bool { return e.Stats().DirtyKeys < n })
}
