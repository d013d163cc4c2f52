package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/counterd/counterd/internal/contract"
)

// MinFreeDiskAuto, as Config.MinFreeDisk (the default), reserves
// autoMinFreeDisk or a tenth of the data directory's filesystem, whichever
// is smaller (a small volume is not read-only from the start).
const MinFreeDiskAuto = ^uint64(0)

// autoMinFreeDisk is the automatic reserve on a volume of 1.25 GiB or more:
// room for Pebble to flush two full memtables (memTableSize) and compact
// them.
const autoMinFreeDisk = 4 * memTableSize

// noSpaceResumeFloor is the least free space after which a node that hit
// ENOSPC with no reserve configured (MinFreeDisk 0) takes writes again.
const noSpaceResumeFloor = 1 << 20

// enospcRetry is how often a write that failed with ENOSPC is tried again.
const enospcRetry = 200 * time.Millisecond

// Storage states.
const (
	diskOK     int32 = iota // writable
	diskLow                 // below the reserve or ENOSPC: read-only until space returns
	diskFailed              // a write or sync failed: read-only until restart
)

// diskGuard watches the data directory's filesystem and what Pebble's
// writes to it return.
type diskGuard struct {
	fs      vfs.FS // unwrapped: statfs and the ENOSPC retries
	dir     string
	minFree uint64
	log     *slog.Logger

	state   atomic.Int32
	reason  atomic.Pointer[string] // why not writable; nil when writable
	faults  atomic.Uint64          // write or sync faults (incl. give-ups)
	waiting atomic.Int32           // writes waiting for space (ENOSPC retries)

	refused   atomic.Uint64 // writes refused while read-only
	ioErrors  atomic.Uint64 // write or sync errors returned by the filesystem
	noSpace   atomic.Uint64 // ENOSPC/EDQUOT returned by the filesystem
	freeBytes atomic.Int64  // last free space read, -1 unknown
	lowSince  atomic.Int64  // unix ns the node turned read-only, 0 writable

	mu sync.Mutex // state transitions
	// stuck is closed (and replaced) when a write to Pebble fails or waits
	// for space: a flush under way may never finish, so waitDurable stops
	// waiting for it.
	stuck atomic.Pointer[chan struct{}]

	// opened is set once Pebble is open and the counters loaded: before,
	// an ENOSPC fails Open (with a clear error) instead of waiting.
	opened  atomic.Bool
	closing chan struct{} // closed by Close: ENOSPC retries give up
	once    sync.Once
}

func newDiskGuard(fs vfs.FS, dir string, minFree uint64, log *slog.Logger) *diskGuard {
	if minFree == MinFreeDiskAuto {
		minFree = autoMinFreeDisk
		if u, err := fs.GetDiskUsage(dir); err == nil && u.TotalBytes > 0 {
			minFree = min(minFree, u.TotalBytes/10)
		}
	}
	g := &diskGuard{fs: fs, dir: dir, minFree: minFree, log: log, closing: make(chan struct{})}
	g.freeBytes.Store(-1)
	ch := make(chan struct{})
	g.stuck.Store(&ch)
	return g
}

// writable returns nil while writes are taken, else an error wrapping
// ErrInsufficientStorage; a refusal is counted. One atomic load when
// writable: it is on every write's path.
func (g *diskGuard) writable() error {
	if g.state.Load() == diskOK {
		return nil
	}
	g.refused.Add(1)
	return g.err()
}

// err is the error of the current state (nil when writable).
func (g *diskGuard) err() error {
	if g.state.Load() == diskOK {
		return nil
	}
	reason := "storage not writable"
	if p := g.reason.Load(); p != nil {
		reason = *p
	}
	return fmt.Errorf("%w: %s", contract.ErrInsufficientStorage, reason)
}

// stuckChan returns a channel closed when a write to Pebble next fails or
// waits for space.
func (g *diskGuard) stuckChan() <-chan struct{} { return *g.stuck.Load() }

// unstick wakes the waiters of stuckChan.
func (g *diskGuard) unstick() {
	ch := make(chan struct{})
	close(*g.stuck.Swap(&ch))
}

// free reads the free space of the data directory's filesystem; ok is
// false when the filesystem cannot tell (in-memory tests).
func (g *diskGuard) free() (uint64, bool) {
	u, err := g.fs.GetDiskUsage(g.dir)
	if err != nil {
		return 0, false
	}
	g.freeBytes.Store(int64(min(u.AvailBytes, 1<<62)))
	return u.AvailBytes, true
}

// resumeAt is the free space above which a read-only (low) node takes
// writes again.
func (g *diskGuard) resumeAt() uint64 {
	if g.minFree == 0 {
		return noSpaceResumeFloor
	}
	return g.minFree + g.minFree/10
}

// check reads the free space and enters or leaves the low state; it
// returns the free space (ok false: unknown).
func (g *diskGuard) check() (uint64, bool) {
	free, ok := g.free()
	if !ok {
		return 0, false
	}
	switch g.state.Load() {
	case diskOK:
		if g.minFree > 0 && free < g.minFree {
			g.enter(diskLow, fmt.Sprintf("%s free on the data directory's filesystem, below --min-free-disk %s", fmtBytes(free), fmtBytes(g.minFree)))
		}
	case diskLow:
		if free >= g.resumeAt() && g.waiting.Load() == 0 {
			g.leave(free)
		}
	}
	return free, true
}

// flushSlack is added to a batch's size for what Pebble writes with it (log
// record headers, a new log file).
const flushSlack = 64 << 10

// admitFlush reports whether the flusher may commit a batch of size bytes:
// it must leave half of the reserve free.
func (g *diskGuard) admitFlush(size uint64) error {
	if g.state.Load() == diskFailed {
		return g.err()
	}
	free, ok := g.check()
	if !ok {
		return nil
	}
	if free >= size+flushSlack+g.minFree/2 {
		return nil
	}
	if g.state.Load() == diskOK {
		g.enter(diskLow, fmt.Sprintf("%s free on the data directory's filesystem, too little to flush %s", fmtBytes(free), fmtBytes(size)))
	}
	return fmt.Errorf("%w: %s free, too little to flush %s and keep half of --min-free-disk (%s); unflushed changes stay in memory", contract.ErrInsufficientStorage, fmtBytes(free), fmtBytes(size), fmtBytes(g.minFree))
}

// enter moves to state s (low or failed) and logs once.
func (g *diskGuard) enter(s int32, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state.Load()
	if old >= s {
		return // already there (or failed, which low does not undo)
	}
	g.reason.Store(&reason)
	g.state.Store(s)
	if old == diskOK {
		g.lowSince.Store(time.Now().UnixNano())
	}
	if s == diskFailed {
		g.log.Error("storage failed: node is read-only until restarted (writes answer insufficient storage, reads are served)", "reason", reason, "data", g.dir)
		return
	}
	g.log.Error("storage full: node is read-only (writes answer insufficient storage, reads are served) until space returns", "reason", reason, "data", g.dir, "min_free_disk", g.minFree)
}

// leave makes a low node writable again and logs once.
func (g *diskGuard) leave(free uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state.Load() != diskLow {
		return
	}
	g.state.Store(diskOK)
	g.reason.Store(nil)
	since := time.Unix(0, g.lowSince.Swap(0))
	g.log.Warn("storage writable again: writes resumed", "free", fmtBytes(free), "data", g.dir, "read_only_for", time.Since(since).Round(time.Millisecond))
}

// fault records a write or sync error that Pebble may not survive: the
// node stays read-only until restarted.
func (g *diskGuard) fault(op, name string, err error) {
	g.faults.Add(1)
	g.enter(diskFailed, fmt.Sprintf("%s %s: %v", op, name, err))
	g.unstick()
}

// faultGen returns the fault count, for faultSince.
func (g *diskGuard) faultGen() uint64 { return g.faults.Load() }

// faultSince returns an error if a fault was recorded after gen.
func (g *diskGuard) faultSince(gen uint64) error {
	if g.faults.Load() != gen {
		return g.err()
	}
	return nil
}

func (g *diskGuard) close() { g.once.Do(func() { close(g.closing) }) }

// isNoSpace reports whether err says the filesystem (or a quota) is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// isStorageError reports whether err is an I/O error of the filesystem,
// which Pebble's Fatalf may report without the process dying.
func isStorageError(err error) bool {
	var fe *diskFault
	return errors.As(err, &fe) || isNoSpace(err) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// diskFault is the error a guarded file returns for a write or sync that
// failed.
type diskFault struct {
	op, name string
	err      error
}

func (d *diskFault) Error() string { return d.op + " " + d.name + ": " + d.err.Error() }
func (d *diskFault) Unwrap() error { return d.err }

// wrapFS returns fs with every file opened for writing guarded.
func (g *diskGuard) wrapFS(fs vfs.FS) vfs.FS { return &guardFS{FS: fs, g: g} }

// guardFS is the filesystem Pebble is opened with (see the top of this
// file).
type guardFS struct {
	vfs.FS
	g *diskGuard
}

func (fs *guardFS) Unwrap() vfs.FS { return fs.FS }

func (fs *guardFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		if isNoSpace(err) {
			fs.g.noSpaceSeen(name, err)
		}
		return nil, err
	}
	return &guardFile{File: f, g: fs.g, name: fs.FS.PathBase(name), retry: !strings.HasSuffix(name, ".sst")}, nil
}

func (fs *guardFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.wrap(name, f, err)
}

func (fs *guardFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, opts...)
	return fs.wrap(name, f, err)
}

func (fs *guardFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	return fs.wrap(newname, f, err)
}

func (fs *guardFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &guardFile{File: f, g: fs.g, name: name}, nil
}

// guardFile records the errors of writes and syncs; with retry (every
// file but an sstable) a write that finds the disk full waits for space
// instead of failing.
type guardFile struct {
	vfs.File
	g     *diskGuard
	name  string
	retry bool
}

// noSpaceSeen records an ENOSPC: the node turns read-only at once.
func (g *diskGuard) noSpaceSeen(name string, err error) {
	g.noSpace.Add(1)
	g.ioErrors.Add(1)
	g.enter(diskLow, fmt.Sprintf("write %s: %v", name, err))
}

// waitSpace waits before an ENOSPC write is retried; false when the
// engine is closing (the write then fails).
func (g *diskGuard) waitSpace() bool {
	if !g.opened.Load() {
		return false
	}
	t := time.NewTimer(enospcRetry)
	defer t.Stop()
	select {
	case <-g.closing:
		return false
	case <-t.C:
		return true
	}
}

func (f *guardFile) Write(p []byte) (int, error) {
	done := 0
	for try := 0; ; try++ {
		n, err := f.File.Write(p[done:])
		done += n
		if err == nil {
			if try > 0 {
				f.g.waiting.Add(-1) // it waited for space (failed)
			}
			return done, nil
		}
		if err2 := f.failed("write", err, try); err2 != nil {
			return done, err2
		}
	}
}

func (f *guardFile) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	for try := 0; ; try++ {
		n, err := f.File.WriteAt(p[done:], off+int64(done))
		done += n
		if err == nil {
			if try > 0 {
				f.g.waiting.Add(-1) // it waited for space (failed)
			}
			return done, nil
		}
		if err2 := f.failed("write", err, try); err2 != nil {
			return done, err2
		}
	}
}

// failed handles a failed write (the try'th retry of one): nil means try
// again (ENOSPC on a file that waits for space); otherwise the error to
// return.
func (f *guardFile) failed(op string, err error, try int) error {
	// A write that retries counts in waiting from its first retry to its
	// end (the caller's success, or the error returned here).
	if isNoSpace(err) {
		if try == 0 {
			f.g.noSpaceSeen(f.name, err)
			if f.retry {
				f.g.waiting.Add(1)
				f.g.unstick() // the flush under way waits for space
			}
		}
		if f.retry {
			if f.g.waitSpace() {
				return nil
			}
			f.g.waiting.Add(-1)
			// Closing with the disk still full: Pebble gets the error.
			f.g.fault(op, f.name, err)
		}
		return &diskFault{op: op, name: f.name, err: err}
	}
	if try > 0 {
		f.g.waiting.Add(-1)
	}
	f.g.ioErrors.Add(1)
	f.g.fault(op, f.name, err)
	return &diskFault{op: op, name: f.name, err: err}
}

// syncErr handles a failed sync: never retried (the kernel may have
// dropped the pages it could not write), a fault unless the file is an
// sstable, whose flush or compaction Pebble retries.
func (f *guardFile) syncErr(err error) error {
	if err == nil {
		return nil
	}
	f.g.ioErrors.Add(1)
	if !f.retry && isNoSpace(err) {
		f.g.noSpaceSeen(f.name, err)
	} else {
		f.g.fault("sync", f.name, err)
	}
	return &diskFault{op: "sync", name: f.name, err: err}
}

func (f *guardFile) Sync() error     { return f.syncErr(f.File.Sync()) }
func (f *guardFile) SyncData() error { return f.syncErr(f.File.SyncData()) }
func (f *guardFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.syncErr(err)
}

// fmtBytes formats n bytes for log lines and errors.
func fmtBytes(n uint64) string {
	switch {
	case n >= 10<<30:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Disk returns the engine's storage state.
func (e *Engine) Disk() contract.DiskStatus {
	g := e.disk
	s := contract.DiskStatus{
		Writable:  g.state.Load() == diskOK,
		Failed:    g.state.Load() == diskFailed,
		FreeBytes: g.freeBytes.Load(),
		MinFree:   g.minFree,
		Refused:   g.refused.Load(),
		IOErrors:  g.ioErrors.Load(),
		NoSpace:   g.noSpace.Load(),
	}
	if p := g.reason.Load(); p != nil && !s.Writable {
		s.Reason = *p
	}
	if t := g.lowSince.Load(); t != 0 {
		s.ReadOnlyFor = time.Since(time.Unix(0, t))
	}
	return s
}

// Writable returns nil while the engine takes writes, else why not (an
// error wrapping ErrInsufficientStorage); it does not count a refusal.
func (e *Engine) Writable() error { return e.disk.err() }

// commitGuarded runs commit (a Pebble commit outside the flusher) unless
// the storage failed, and fails it if a fault was recorded meanwhile
// (Pebble's Apply returns nil after a Fatalf that did not panic).
func (e *Engine) commitGuarded(commit func() error) error {
	gen := e.disk.faultGen()
	if e.disk.state.Load() == diskFailed {
		return e.disk.err()
	}
	if err := commit(); err != nil {
		return err
	}
	return e.disk.faultSince(gen)
}
