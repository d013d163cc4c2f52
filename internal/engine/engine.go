package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/rollup"
)

// Config configures an Engine. The zero value is not valid; start from
// DefaultConfig.
type Config struct {
	Dir      string // Pebble directory (default "./data")
	InMemory bool   // keep Pebble in memory (tests); nothing survives Close
	// FS, when set, is the filesystem Pebble uses under Dir (tests inject
	// vfs.NewStrictMem to simulate a crash). Default: the OS filesystem.
	FS     vfs.FS
	NodeID string // this node's replica name in pn counters (default "local")

	Durability    contract.Durability // default acknowledgement mode (default Async)
	FlushInterval time.Duration       // async flush period (default 1s)

	IdempotencyRetention time.Duration // how long retries are recognised (default 24h)
	IdempotencyMemory    int           // records kept in memory; older ones are read from disk (default 100000)

	MaxBatch      int                // ops per batch (default 1000)
	DefaultShards int                // shards of a new sharded counter (default 16)
	MaxShards     int                // upper bound on shards (default 1024)
	DefaultWindow counter.WindowSpec // window of a new window counter (default 60 x 60s)
	HLLPrecision  uint8              // precision of a new hll (default 14)

	// Rollups gives counters minute/hour/day/month buckets of their
	// increments (and hll counters per-hour and per-day sketches), by key:
	// a namespace (the id up to its first ':') or an id, which overrides
	// its namespace. Specs set with Engine.SetRollup override these.
	// Default: none.
	Rollups map[string]rollup.Spec
	// RollupPurgeInterval is how often rollups past their retention are
	// deleted (default 10m; 0 means the default).
	RollupPurgeInterval time.Duration

	// MinFreeDisk is the free space, in bytes, below which the data
	// directory's filesystem takes no more writes: they fail with
	// ErrInsufficientStorage until it is back above it (plus a tenth);
	// reads are served meanwhile, and what was acknowledged is flushed
	// while half of it remains (disk.go). 0 refuses writes only once the
	// filesystem returned ENOSPC. Default MinFreeDiskAuto: 128 MiB, or a
	// tenth of the filesystem if that is smaller.
	MinFreeDisk uint64
	// MemTableSize is the largest Pebble memtable, in bytes (0: the default,
	// 32 MiB). Up to two are held under a sustained write load, so it is
	// what a memory budget bounds (the server derives it from
	// --memory-limit: docs/operations.md, "Memory").
	MemTableSize uint64
	// DiskCheckInterval is how often the free space is read between
	// flushes, and a read-only engine tries to flush and to resume
	// (default 1s; 0 means the default).
	DiskCheckInterval time.Duration

	// Clock, when set, is called for every timestamp (tests inject one).
	// When nil (the default) the engine reads a coarse clock
	// (internal/coarse), which keeps time.Now off the hot path: at most
	// about a millisecond old while reads come often, refreshed by the
	// Redis-protocol event loop per round while it serves, and read from
	// the system clock when idle, without a ticker waking the process.
	// Quotas bound the keys per namespace and the fields per hash
	// (internal/quota); nil (the default) is no quotas, at no cost.
	// SetQuotas replaces them.
	Quotas *quota.Config

	Clock  func() time.Time
	Logger *slog.Logger // default slog.Default()
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Dir:                  "./data",
		NodeID:               "local",
		Durability:           contract.Async,
		FlushInterval:        time.Second,
		IdempotencyRetention: 24 * time.Hour,
		IdempotencyMemory:    100000,
		MaxBatch:             1000,
		DefaultShards:        16,
		MaxShards:            1024,
		DefaultWindow:        counter.WindowSpec{Granularity: time.Minute, Span: time.Hour},
		HLLPrecision:         14,
		RollupPurgeInterval:  10 * time.Minute,
		MinFreeDisk:          MinFreeDiskAuto,
		DiskCheckInterval:    time.Second,
		Logger:               slog.Default(),
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "" && !c.InMemory:
		return errors.New("engine: config: Dir is empty")
	case c.NodeID == "":
		return errors.New("engine: config: NodeID is empty")
	case c.Durability != contract.Async && c.Durability != contract.Sync:
		return errors.New("engine: config: Durability must be Async or Sync")
	case c.FlushInterval <= 0:
		return errors.New("engine: config: FlushInterval must be positive")
	case c.IdempotencyRetention <= 0:
		return errors.New("engine: config: IdempotencyRetention must be positive")
	case c.IdempotencyMemory <= 0:
		return errors.New("engine: config: IdempotencyMemory must be positive")
	case c.MaxBatch <= 0:
		return errors.New("engine: config: MaxBatch must be positive")
	case c.DefaultShards <= 0 || c.DefaultShards > c.MaxShards:
		return errors.New("engine: config: DefaultShards must be in 1..MaxShards")
	case c.Logger == nil:
		return errors.New("engine: config: Logger must be set")
	}
	if err := c.DefaultWindow.Validate(); err != nil {
		return fmt.Errorf("engine: config: DefaultWindow: %w", err)
	}
	if err := counter.ValidatePrecision(c.HLLPrecision); err != nil {
		return fmt.Errorf("engine: config: %w", err)
	}
	for key, s := range c.Rollups {
		if err := ValidateRollupKey(key); err != nil {
			return fmt.Errorf("engine: config: Rollups: %w", err)
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("engine: config: Rollups[%q]: %w", key, err)
		}
	}
	if c.DiskCheckInterval < 0 {
		return errors.New("engine: config: DiskCheckInterval is negative")
	}
	if c.RollupPurgeInterval < 0 {
		return errors.New("engine: config: RollupPurgeInterval is negative")
	}
	if c.MemTableSize != 0 && (c.MemTableSize < MinMemTableSize || c.MemTableSize > memTableSize) {
		return fmt.Errorf("engine: config: MemTableSize %d is outside %d..%d", c.MemTableSize, MinMemTableSize, memTableSize)
	}
	return nil
}
