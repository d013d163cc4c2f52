package consumer

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/rules"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// phasedStream is a stream.PollCommitter whose Poll returns the polls the
// test sends on gate, and tells on idle, when it finds none, how many it
// returned so far. Commit records what it commits and calls onCommit
// first.
type phasedStream struct {
	*fakeStream
	gate     chan [][]stream.Record
	idle     chan int
	returned int
	onCommit func()
}

func (p *phasedStream) CommitsOldestPolls() {}

func (p *phasedStream) Poll(ctx context.Context) ([][]stream.Record, error) {
	select {
	case g := <-p.gate:
		p.returned++
		return g, nil
	default:
	}
	select {
	case <-p.idle: // (stale: the latest count only)
	default:
	}
	select {
	case p.idle <- p.returned:
	default:
	}
	select {
	case g := <-p.gate:
		p.returned++
		return g, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *phasedStream) Commit(_ context.Context, groups [][]stream.Record) error {
	p.mu.Lock()
	if p.onCommit != nil {
		p.onCommit()
	}
	p.commits = append(p.commits, commitOrdered(p.t, p.last, groups))
	p.mu.Unlock()
	p.commit <- struct{}{}
	return nil
}

// TestRunWaitsForEngineFlushes: on the embedded engine and a stream that
// commits some polls at a time, Run hands each poll to the engine's next
// flush instead of a flush of its own, and commits the polls when that
// flush ended: polls made no flush (one flush, here the test's, the
// periodic one being an hour away, ended them all); and a power loss
// right at a commit loses nothing it committed.
func TestRunWaitsForEngineFlushes(t *testing.T) {
	fs := vfs.NewStrictMem()
	if err := fs.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	root.Sync()
	root.Close()
	cfg := engine.DefaultConfig()
	cfg.Dir, cfg.FS, cfg.NodeID = "/data", fs, "n1"
	cfg.FlushInterval = time.Hour // only the test's sync writes flush
	e, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	rs, err := rules.Load("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewApplier(engine.Local(e), rs, event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Longer than the flush interval: the polls wait for the engine's
	// flush; a commit that waited for one of its own would not come
	// before the interval or the cap of uncommitted messages.
	a.SetCommitInterval(2 * time.Hour)

	const phase = 3 // full polls a phase: below the cap
	if phase*stream.PollMessages >= MaxUncommittedMessages {
		t.Fatalf("%d polls reach the cap of %d messages", phase, MaxUncommittedMessages)
	}
	ps, views := streamPolls(2*phase, stream.PollMessages, 2, false)
	last := map[int32]int64{}
	for _, p := range ps {
		for _, g := range p {
			for _, r := range g {
				last[r.Partition] = r.Offset
			}
		}
	}
	var lossAt sync.Once
	power := false // the power loss began: at the second phase's commit
	f := &phasedStream{fakeStream: newFakeStream(t, nil, nil), gate: make(chan [][]stream.Record, phase), idle: make(chan int, 1)}
	f.onCommit = func() {
		if power {
			lossAt.Do(func() { fs.SetIgnoreSyncs(true) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, a, f, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			t.Error(err)
		}
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	defer stop()
	flushes := func() uint64 { return e.Stats().Flushes }
	f0 := flushes()
	for ph := range 2 {
		for _, p := range ps[ph*phase : (ph+1)*phase] {
			f.gate <- p
		}
		for n := 0; n < (ph+1)*phase; {
			select {
			case n = <-f.idle:
			case <-time.After(20 * time.Second):
				t.Fatalf("phase %d: the polls were not applied", ph)
			}
		}
		if c, _ := f.committed(); c != ph {
			t.Fatalf("phase %d: %d commits before a flush, want %d", ph, c, ph)
		}
		if got := flushes() - f0; got != uint64(ph) {
			t.Fatalf("phase %d: %d polls made %d flushes before the test's, want %d", ph, (ph+1)*phase, got, ph)
		}
		f.mu.Lock()
		power = ph == 1
		f.mu.Unlock()
		// The flush the polls wait for: a sync writer's.
		if _, err := e.ApplyBatch(context.Background(), []contract.Op{{Type: contract.OpSet, ID: "other", Value: int64(ph)}}, contract.WriteOptions{Durability: contract.Sync}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.commit:
		case <-time.After(20 * time.Second):
			t.Fatalf("phase %d: the polls were not committed after the flush", ph)
		}
		if c, n := f.committed(); c != ph+1 || n != (ph+1)*phase*2*stream.PollMessages {
			t.Fatalf("phase %d: %d commits of %d records, want %d of %d", ph, c, n, ph+1, (ph+1)*phase*2*stream.PollMessages)
		}
		if got := flushes() - f0; got != uint64(ph+1) {
			t.Errorf("phase %d: %d flushes, want %d (the test's only)", ph, got, ph+1)
		}
	}
	stop()
	// The power loss began at the last commit: what was committed is on
	// disk.
	e.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	if e, err = engine.Open(cfg); err != nil {
		t.Fatal(err)
	}
	checkViews(t, e, views)
	for p, o := range last {
		v, err := e.Get(ProgressID("fake", p))
		if err != nil || v.Value != o {
			t.Errorf("partition %d: progress %d (%v) after the power loss, want %d", p, v.Value, err, o)
		}
	}
}
