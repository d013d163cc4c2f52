package engine

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// testDisk is Pebble's strict in-memory filesystem (what was not synced is
// lost at a simulated power loss) under Pebble's fault-injecting one
// (errorfs), with a free space the test sets (statfs).
type testDisk struct {
	*errorfs.FS
	mem   *vfs.MemFS
	avail atomic.Uint64 // GetDiskUsage's AvailBytes
	total atomic.Uint64 // GetDiskUsage's TotalBytes
	full  atomic.Bool   // every write fails with ENOSPC
	eio   atomic.Bool   // every write to a log (WAL) file fails with EIO
}

func newTestDisk(t *testing.T) *testDisk {
	d := &testDisk{mem: strictMemDir(t, "/data")}
	d.avail.Store(1 << 30)
	d.total.Store(1 << 31)
	d.FS = errorfs.Wrap(d.mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op != errorfs.OpFileWrite && op != errorfs.OpFileWriteAt {
			return nil
		}
		if d.full.Load() {
			return syscall.ENOSPC
		}
		if d.eio.Load() && strings.HasSuffix(path, ".log") {
			return syscall.EIO
		}
		return nil
	}))
	return d
}

func (d *testDisk) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: d.avail.Load(), TotalBytes: d.total.Load()}, nil
}

// logBuf collects an engine's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func diskConfig(d *testDisk, logs *logBuf) Config {
	cfg := DefaultConfig()
	cfg.Dir = "/data"
	cfg.FS = d
	cfg.NodeID = "n1"
	cfg.FlushInterval = time.Hour // only sync writes and the disk checks flush
	cfg.DiskCheckInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return cfg
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantStorageErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, contract.ErrInsufficientStorage) {
		t.Fatalf("%s: err %v, want ErrInsufficientStorage", what, err)
	}
}

var (
	syncW  = contract.WriteOptions{Durability: contract.Sync}
	asyncW = contract.WriteOptions{Durability: contract.Async}
)

// acked is what a test's writes were acknowledged: the count of INCRs of
// "n", the fields of hash "h" and the items PFADDed to "u".
type acked struct {
	n      int64
	fields []string
	items  int
}

func (a *acked) write(t *testing.T, e *Engine, i int, wo contract.WriteOptions) error {
	t.Helper()
	if _, err := e.Add(bg, "n", 1, wo); err != nil {
		return err
	}
	a.n++
	f := fmt.Sprint("f", i)
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: f, Delta: 1}}}, wo); err != nil {
		return err
	}
	a.fields = append(a.fields, f)
	if _, err := e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{fmt.Append(nil, "user", i)}}, wo); err != nil {
		return err
	}
	a.items++
	return nil
}

// check verifies that every acknowledged write is in e; n may hold one
// more (a sync write that failed after it was applied in memory, which is
// flushed later: the error said it was not made durable then).
func (a *acked) check(t *testing.T, e *Engine, extra int64) {
	t.Helper()
	if v := mustGet(t, e, "n").Value; v < a.n || v > a.n+extra {
		t.Fatalf("n = %d, want the %d acknowledged increments (+%d not acknowledged)", v, a.n, extra)
	}
	for _, f := range a.fields {
		if v, ok, err := e.HGet("h", f); err != nil || !ok || v != 1 {
			t.Fatalf("h.%s = %d, %v, %v: an acknowledged field is missing", f, v, ok, err)
		}
	}
	if n, _, err := e.PFCount("u"); err != nil || n < uint64(a.items)*98/100 || n > uint64(a.items+1)*102/100+1 {
		t.Fatalf("PFCOUNT u = %d, %v; %d items acknowledged", n, err, a.items)
	}
}

// TestDiskFullENOSPC: with no reserve (MinFreeDisk 0) and a filesystem
// that says it has room, writes start failing with ENOSPC (something
// else filled the disk). The node does not panic: the write under way
// fails with ErrInsufficientStorage, every later write is refused before
// it changes anything, sync or async, reads are served from memory,
// Ready says why; once writes succeed again the node resumes by itself,
// and after a power loss every acknowledged write is there.
func TestDiskFullENOSPC(t *testing.T) {
	d := newTestDisk(t)
	var logs logBuf
	cfg := diskConfig(d, &logs)
	cfg.MinFreeDisk = 0
	e := mustOpen(t, cfg)
	var a acked
	for i := range 20 {
		if err := a.write(t, e, i, syncW); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Ready(); err != nil {
		t.Fatal(err)
	}

	d.full.Store(true)
	_, err := e.Add(bg, "n", 1, syncW)
	wantStorageErr(t, "sync write on a full disk", err)
	if e.Writable() == nil || e.Disk().Writable || e.Disk().NoSpace == 0 {
		t.Fatalf("still writable after ENOSPC: %+v", e.Disk())
	}
	before := mustGet(t, e, "n").Value // a.n or a.n+1: applied in memory
	for i := range 50 {
		wo := syncW
		if i%2 == 1 {
			wo = asyncW
		}
		_, err := e.Add(bg, "n", 1, wo)
		wantStorageErr(t, "write while read-only", err)
		_, err = e.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "u", Items: [][]byte{[]byte("refused")}}, wo)
		wantStorageErr(t, "PFADD while read-only", err)
		_, err = e.ApplyBatch(bg, []contract.Op{{Type: contract.OpAdd, ID: "other", Delta: 1}}, wo)
		wantStorageErr(t, "batch while read-only", err)
	}
	if v := mustGet(t, e, "n").Value; v != before {
		t.Fatalf("refused writes changed n: %d, was %d", v, before)
	}
	if mustGet(t, e, "other").Exists {
		t.Fatal("a refused batch created its counter")
	}
	a.check(t, e, 1) // reads are served from memory
	wantStorageErr(t, "Ready", e.Ready())
	if got := e.Disk().Refused; got < 150 {
		t.Fatalf("refused writes counted %d, want at least 150", got)
	}

	d.full.Store(false) // space returns
	waitFor(t, "writes to resume", func() bool { return e.Writable() == nil })
	if err := a.write(t, e, 100, syncW); err != nil {
		t.Fatalf("write after space returned: %v", err)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("Ready after space returned: %v", err)
	}
	if n, m := logs.count("storage full"), logs.count("storage writable again"); n != 1 || m != 1 {
		t.Fatalf("logged read-only %d and writable %d times, want once each:\n%s", n, m, logs.b.String())
	}

	d.mem.SetIgnoreSyncs(true) // power loss
	e = reopenAfterPowerLoss(t, e, d.mem, cfg)
	defer e.Close()
	a.check(t, e, 1)
}

// TestDiskReserve: writes are refused once the free space is below
// MinFreeDisk, before Pebble could run out; what was acknowledged (async)
// stays in memory and is flushed as soon as a flush fits in half the
// reserve, while writes stay refused; writes resume once the free space
// is back above the reserve, with one log line each way.
func TestDiskReserve(t *testing.T) {
	d := newTestDisk(t)
	var logs logBuf
	cfg := diskConfig(d, &logs)
	cfg.MinFreeDisk = 1 << 20
	e := mustOpen(t, cfg)
	var a acked
	for i := range 10 {
		if err := a.write(t, e, i, syncW); err != nil {
			t.Fatal(err)
		}
	}
	var async acked // acknowledged, not flushed (no flush timer)
	for range 10 {
		if _, err := e.Add(bg, "a", 1, asyncW); err != nil {
			t.Fatal(err)
		}
		async.n++
	}

	d.avail.Store(100 << 10) // below half the reserve: nothing can flush
	waitFor(t, "read-only", func() bool { return e.Writable() != nil })
	wantStorageErr(t, "Writable", e.Writable())
	for i := range 100 {
		wo := syncW
		if i%2 == 1 {
			wo = asyncW
		}
		_, err := e.Add(bg, "a", 1, wo)
		wantStorageErr(t, "write below the reserve", err)
		_, err = e.Apply(bg, contract.Op{Type: contract.OpHAdd, ID: "h", Fields: []counter.FieldDelta{{Name: "refused", Delta: 1}}}, wo)
		wantStorageErr(t, "HADD below the reserve", err)
	}
	if v := mustGet(t, e, "a").Value; v != async.n {
		t.Fatalf("a = %d, want the %d acknowledged", v, async.n)
	}
	if _, ok, _ := e.HGet("h", "refused"); ok {
		t.Fatal("a refused write changed h")
	}
	a.check(t, e, 0)
	if e.Stats().DirtyKeys == 0 {
		t.Fatal("the acknowledged async writes were flushed with no room")
	}

	d.avail.Store(700 << 10) // room to flush (above half), still below the reserve
	waitFor(t, "the acknowledged writes to be flushed", func() bool { return e.Stats().DirtyKeys == 0 })
	wantStorageErr(t, "Writable below the reserve", e.Writable())
	_, err := e.Add(bg, "a", 1, asyncW)
	wantStorageErr(t, "write below the reserve", err)

	d.avail.Store(64 << 20)
	waitFor(t, "writes to resume", func() bool { return e.Writable() == nil })
	if _, err := e.Add(bg, "a", 1, syncW); err != nil {
		t.Fatal(err)
	}
	async.n++
	if n, m := logs.count("storage full"), logs.count("storage writable again"); n != 1 || m != 1 {
		t.Fatalf("logged read-only %d and writable %d times, want once each:\n%s", n, m, logs.b.String())
	}

	d.mem.SetIgnoreSyncs(true)
	e = reopenAfterPowerLoss(t, e, d.mem, cfg)
	defer e.Close()
	a.check(t, e, 0)
	if v := mustGet(t, e, "a").Value; v != async.n {
		t.Fatalf("after power loss a = %d, want %d", v, async.n)
	}
}

// TestDiskFaultEIO: a write to the log that fails with EIO (a failing
// disk) does not crash the node: the sync write fails, the node stays
// read-only (a fault is not retried, even once the disk answers again),
// reads are served, Close does not hang or panic, and every acknowledged
// write is there after a restart.
func TestDiskFaultEIO(t *testing.T) {
	d := newTestDisk(t)
	var logs logBuf
	cfg := diskConfig(d, &logs)
	e := mustOpen(t, cfg)
	var a acked
	for i := range 10 {
		if err := a.write(t, e, i, syncW); err != nil {
			t.Fatal(err)
		}
	}
	d.eio.Store(true)
	_, err := e.Add(bg, "n", 1, syncW)
	wantStorageErr(t, "sync write on a failing disk", err)
	if st := e.Disk(); !st.Failed || st.Writable || st.IOErrors == 0 {
		t.Fatalf("after EIO: %+v", st)
	}
	d.eio.Store(false)
	time.Sleep(50 * time.Millisecond) // several disk checks
	_, err = e.Add(bg, "n", 1, asyncW)
	wantStorageErr(t, "write after a fault", err)
	a.check(t, e, 1)
	if n := logs.count("storage failed"); n != 1 {
		t.Fatalf("logged the fault %d times, want once:\n%s", n, logs.b.String())
	}
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err := <-done:
		t.Logf("close after a fault: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs after a fault")
	}
	e = mustOpen(t, cfg)
	defer e.Close()
	a.check(t, e, 1)
}

// TestDiskAutoReserve: the default reserve is 128 MiB, or a tenth of a
// smaller filesystem (which then is not read-only from the start).
func TestDiskAutoReserve(t *testing.T) {
	for _, c := range []struct{ total, avail, want uint64 }{
		{1 << 40, 1 << 39, autoMinFreeDisk},
		{3 << 20, 2 << 20, (3 << 20) / 10},
	} {
		d := newTestDisk(t)
		d.total.Store(c.total)
		d.avail.Store(c.avail)
		var logs logBuf
		cfg := diskConfig(d, &logs)
		if cfg.MinFreeDisk != MinFreeDiskAuto {
			t.Fatalf("default MinFreeDisk %d, want MinFreeDiskAuto", cfg.MinFreeDisk)
		}
		e := mustOpen(t, cfg)
		if got := e.Disk().MinFree; got != c.want {
			t.Fatalf("filesystem of %d bytes: reserve %d, want %d", c.total, got, c.want)
		}
		if _, err := e.Add(bg, "n", 1, syncW); err != nil {
			t.Fatalf("filesystem of %d bytes, %d free: %v", c.total, c.avail, err)
		}
		e.Close()
	}
}

// TestPebbleFatalfStorageOnly: Pebble's Fatalf still panics for what is
// not a storage error (an invariant broken: going on could corrupt data).
func TestPebbleFatalfStorageOnly(t *testing.T) {
	var logs logBuf
	g := newDiskGuard(vfs.NewMem(), "", 0, slog.New(slog.NewTextHandler(&logs, nil)))
	p := pebbleLogger{l: slog.New(slog.NewTextHandler(&logs, nil)), g: g}
	p.Fatalf("pebble: fatal commit error: %v", fmt.Errorf("write 000002.log: %w", syscall.ENOSPC))
	if g.state.Load() != diskFailed {
		t.Fatal("a storage error in Fatalf was not recorded")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Fatalf for a broken invariant did not panic")
		}
	}()
	p.Fatalf("L%d->L%d: %s already being compacted", 0, 6, "000012")
}

// TestDiskOpenFull: a node restarted on a disk below the reserve opens
// read-only and serves what it loaded; on a disk that fails every write
// with ENOSPC, Open neither hangs nor panics: it fails with the error, or
// opens read-only.
func TestDiskOpenFull(t *testing.T) {
	d := newTestDisk(t)
	var logs logBuf
	cfg := diskConfig(d, &logs)
	cfg.MinFreeDisk = 1 << 20
	e := mustOpen(t, cfg)
	if _, err := e.Add(bg, "n", 7, syncW); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	d.avail.Store(100 << 10)
	e = mustOpen(t, cfg)
	wantStorageErr(t, "Writable after opening below the reserve", e.Writable())
	if v := mustGet(t, e, "n").Value; v != 7 {
		t.Fatalf("n = %d after opening read-only, want 7", v)
	}
	_, err := e.Add(bg, "n", 1, asyncW)
	wantStorageErr(t, "write after opening below the reserve", err)
	e.Close()

	d.full.Store(true)
	type opened struct {
		e   *Engine
		err error
	}
	done := make(chan opened, 1)
	go func() {
		e, err := Open(cfg)
		done <- opened{e, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			if !strings.Contains(o.err.Error(), "no space left on device") {
				t.Fatalf("Open on a full disk: %v, want it to say no space left", o.err)
			}
			t.Logf("Open on a full disk: %v", o.err)
			return
		}
		defer o.e.Close()
		wantStorageErr(t, "Writable after opening on a full disk", o.e.Writable())
		if v := mustGet(t, o.e, "n").Value; v != 7 {
			t.Fatalf("n = %d, want 7", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open hangs on a full disk")
	}
}
