package backendtest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

// A full disk (docs/operations.md, "Full disk"): a backend whose storage
// cannot take more refuses every write with contract.ErrInsufficientStorage
// before it changes anything, sync or async, with an idempotency key or in
// a batch; reads are served; writes are taken again once space returns,
// without a restart. Setup.FillDisk makes the storage full; a backend
// without local disk state (tiered: Redis and PostgreSQL are its storage,
// and a full Redis or PostgreSQL is their own error) has none and the
// group is skipped with a log line.

// DiskFS is the OS filesystem with a free space the test sets: an engine
// opened on it (engine.Config.FS) sees a full disk when told, without
// filling one.
type DiskFS struct {
	vfs.FS
	full atomic.Bool
}

// NewDiskFS returns the OS filesystem, not full.
func NewDiskFS() *DiskFS { return &DiskFS{FS: vfs.Default} }

// SetFull makes the filesystem report no free space (true) or its real
// free space (false).
func (d *DiskFS) SetFull(full bool) { d.full.Store(full) }

// GetDiskUsage reports no free space while full.
func (d *DiskFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	u, err := d.FS.GetDiskUsage(path)
	if err == nil && d.full.Load() {
		u.UsedBytes += u.AvailBytes
		u.AvailBytes = 0
	}
	return u, err
}

// FillEngines returns a Setup.FillDisk for engines opened on fss (one per
// node): it sets every filesystem full or not and waits until every
// engine refuses, or takes, writes.
func FillEngines(fss []*DiskFS, engs []*engine.Engine) func(t testing.TB, full bool) {
	return func(t testing.TB, full bool) {
		t.Helper()
		for _, fs := range fss {
			fs.SetFull(full)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, e := range engs {
			for (e.Writable() == nil) == full {
				if time.Now().After(deadline) {
					t.Fatalf("engine %s: still writable=%v after the disk was made full=%v", e.NodeID(), !full, full)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// diskCases are the full-disk cases (skipped without Setup.FillDisk).
func diskCases() []tcase {
	return []tcase{
		{"full disk refuses writes and serves reads", func(e *env) {
			if e.s.FillDisk == nil {
				e.t.Skip("backend without local disk state (Setup.FillDisk unset): no full-disk behaviour to check")
			}
			populate(e)
			before := map[string]snapshot{}
			for _, n := range allNames {
				before[n] = e.snap(e.id(n))
			}
			e.s.FillDisk(e.t, true)
			e.t.Cleanup(func() { e.s.FillDisk(e.t, false) }) // later cases need a writable backend
			sync, async := contract.WriteOptions{Durability: contract.Sync}, contract.WriteOptions{Durability: contract.Async}
			for _, wo := range []contract.WriteOptions{sync, async, {}, {IdempotencyKey: e.p + "disk.key"}} {
				for _, op := range []contract.Op{
					add(e.id("c"), contract.KindCounter, 1),
					set(e.id("c"), 9),
					add(e.id("pn"), contract.KindPN, 1),
					pfadd(e.id("u"), "late"),
					hadd(e.id("h"), fd("f", 1)),
					{Type: contract.OpDelete, ID: e.id("c")},
					{Type: contract.OpExpire, ID: e.id("c"), TTL: time.Hour},
					add(e.id("new"), contract.KindCounter, 1),
				} {
					_, err := e.b.Apply(e.ctx, op, wo)
					e.wantErr(string(op.Type)+" on a full disk", err, contract.ErrInsufficientStorage)
				}
				_, err := e.b.ApplyBatch(e.ctx, []contract.Op{add(e.id("c"), contract.KindCounter, 1), add(e.id("new"), contract.KindCounter, 1)}, wo)
				e.wantErr("batch on a full disk", err, contract.ErrInsufficientStorage)
			}
			for _, n := range allNames {
				e.unchanged(e.id(n), before[n])
			}
			e.wantMissing(e.id("new"))
			if n, _, err := e.b.PFCount(e.ctx, e.id("u")); err != nil || n != 2 {
				e.t.Errorf("PFCOUNT on a full disk: %d, %v; want 2", n, err)
			}

			e.s.FillDisk(e.t, false)
			e.apply(add(e.id("c"), contract.KindCounter, 1))
			e.wantValue(e.id("c"), contract.KindCounter, 6)
			r, err := e.b.Apply(e.ctx, add(e.id("new"), contract.KindCounter, 1), sync)
			if err != nil || r.Value != 1 {
				e.t.Errorf("sync write after space returned: %+v, %v", r, err)
			}
		}},
	}
}
