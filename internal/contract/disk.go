package contract

import (
	"errors"
	"time"
)

// A full or failing disk (docs/operations.md, "Full disk").
//
// Pebble treats a failed write to its write-ahead log or MANIFEST as fatal
// (Logger.Fatalf: "fatal commit error", "MANIFEST ... failed"): its log
// writer keeps the first error for good and the commit pipeline cannot go
// on. Failed flushes and compactions (sstables) are background errors it
// reports (EventListener.BackgroundError) and retries. So the engine keeps
// Pebble from running out of space instead of recovering after it did:
//
//   - Writes are refused (ErrInsufficientStorage) while the data
//     directory's filesystem has less than Config.MinFreeDisk free; the
//     flusher, which alone writes counters to Pebble, still commits what
//     was acknowledged while a commit leaves half of the reserve free (the
//     other half is Pebble's, for memtable flushes and compactions). The
//     free space is read (statfs) before every flush and every
//     Config.DiskCheckInterval, and writes resume by themselves once it is back above
//     the reserve (plus a tenth, so a node at the edge does not flap).
//   - Pebble's filesystem is wrapped (guardFS): a write that fails with
//     ENOSPC/EDQUOT anyway (something else filled the disk between two
//     checks) turns the node read-only at once and, for every file but an
//     sstable, is retried until space returns (Pebble never sees it, so its
//     log stays usable); an sstable write fails to Pebble, which retries
//     the flush or compaction. Any other write or sync error (EIO, a failed
//     fsync, whose pages the kernel may have dropped) is a fault: the node
//     stays read-only until restarted, and nothing is committed to Pebble
//     again in this process.
//   - Pebble's Fatalf does not panic for a storage error (it records the
//     fault); the flusher checks for a fault after every commit, since
//     Pebble's Apply returns nil after Fatalf returns.
//
// Reads are served from memory throughout.

// ErrInsufficientStorage: the write cannot be made durable (the data
// directory's filesystem is full or below Config.MinFreeDisk, or failing);
// nothing was applied. HTTP 507, RESP -MISCONF, gRPC UNAVAILABLE. Writes
// resume by themselves when space returns (not after a fault: restart).
var ErrInsufficientStorage = errors.New("engine: insufficient storage")

// DiskStatus is the storage state of an engine (metrics, /readyz).
type DiskStatus struct {
	Writable bool
	// Failed: a write or sync failed; read-only until restarted.
	Failed bool
	// Reason says why the node is read-only (empty when writable).
	Reason string
	// FreeBytes is the free space last read on the data directory's
	// filesystem (-1: unknown, e.g. in memory).
	FreeBytes   int64
	MinFree     uint64
	Refused     uint64 // writes refused while read-only
	IOErrors    uint64 // write and sync errors returned by the filesystem
	NoSpace     uint64 // of which ENOSPC/EDQUOT
	ReadOnlyFor time.Duration
}
