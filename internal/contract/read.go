package contract

import (
	"time"
)

// Stats are counters for INFO and metrics.
type Stats struct {
	Keys    int    // live counters
	Expires int    // live counters with a TTL
	Ops     uint64 // mutations applied since Open
	Flushes uint64 // durable flushes since Open
	// FlushFailures counts flushes that failed since Open (each is
	// retried; Ready reports the last one until a flush succeeds).
	FlushFailures uint64
	LastFlush     time.Time
	DirtyKeys     int // counters changed since the last flush
	IdemRecords   int // idempotency records held in memory
	// Disk is the data directory's storage state (disk.go); nil for a
	// backend without local disk state (tiered).
	Disk *DiskStatus
}
