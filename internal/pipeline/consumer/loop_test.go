package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// durabilityLog is the engine with its async batches and synced writes
// counted: pending is how many batches went in since the last synced
// write.
type durabilityLog struct {
	contract.Backend
	engine.MarkApplier
	mu      sync.Mutex
	pending int
	syncs   int
}

func (d *durabilityLog) ApplyMarked(ctx context.Context, ops []contract.Op, marks []string, ttl time.Duration, wo contract.WriteOptions) error {
	err := d.MarkApplier.ApplyMarked(ctx, ops, marks, ttl, wo)
	d.mu.Lock()
	d.pending++ // (a failed batch too: it might have gone in)
	d.mu.Unlock()
	return err
}

func (d *durabilityLog) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	d.mu.Lock()
	before := d.pending
	d.mu.Unlock()
	res, err := d.Backend.ApplyBatch(ctx, ops, wo)
	if err == nil && wo.Durability == contract.Sync {
		d.mu.Lock()
		d.pending -= before // what was applied before the synced write is durable
		d.syncs++
		d.mu.Unlock()
	}
	return res, err
}

// fakeStream is a stream.Consumer of prepared polls. Poll returns them in
// turn, then blocks until its context ends. Commit checks that nothing
// applied is still waiting for durability and records what it commits.
type fakeStream struct {
	t       *testing.T
	d       *durabilityLog
	mu      sync.Mutex
	polls   [][][]stream.Record
	next    int
	commits []int           // records of each commit
	last    map[int32]int64 // the last offset committed, by partition
	dead    int
	drained chan struct{} // closed when Poll finds no poll left
	commit  chan struct{} // a commit was made
}

func newFakeStream(t *testing.T, d *durabilityLog, polls [][][]stream.Record) *fakeStream {
	return &fakeStream{t: t, d: d, polls: polls, last: map[int32]int64{}, drained: make(chan struct{}), commit: make(chan struct{}, 1000)}
}

func (f *fakeStream) Name() string { return "fake" }

func (f *fakeStream) Poll(ctx context.Context) ([][]stream.Record, error) {
	f.mu.Lock()
	if f.next < len(f.polls) {
		p := f.polls[f.next]
		f.next++
		f.mu.Unlock()
		return p, nil
	}
	if f.next == len(f.polls) {
		f.next++
		close(f.drained)
	}
	f.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeStream) DeadLetter(_ context.Context, dls []stream.DeadLetter) error {
	f.mu.Lock()
	f.dead += len(dls)
	f.mu.Unlock()
	return nil
}

// commitOrdered fails t unless each partition's commit comes after its
// last one (last: the last offset committed per partition, updated), and
// returns the number of records committed.
func commitOrdered(t *testing.T, last map[int32]int64, groups [][]stream.Record) int {
	n := 0
	for _, g := range groups {
		n += len(g)
		if len(g) > 0 {
			p := g[0].Partition
			if prev, ok := last[p]; ok && g[0].Offset <= prev {
				t.Errorf("partition %d: commit of offset %d after %d", p, g[0].Offset, prev)
			}
			last[p] = g[len(g)-1].Offset
		}
	}
	return n
}

func (f *fakeStream) Commit(_ context.Context, groups [][]stream.Record) error {
	f.d.mu.Lock()
	pending := f.d.pending
	f.d.mu.Unlock()
	if pending != 0 {
		f.t.Errorf("commit with %d batches applied since the last synced write", pending)
	}
	f.mu.Lock()
	f.commits = append(f.commits, commitOrdered(f.t, f.last, groups))
	f.mu.Unlock()
	f.commit <- struct{}{}
	return nil
}

func (f *fakeStream) Lag(context.Context) map[int32]int64 { return nil }
func (f *fakeStream) Close() error                        { return nil }

func (f *fakeStream) committed() (commits, records int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.commits {
		records += n
	}
	return len(f.commits), records
}

// loopApplier is an applier of testRules over an in-memory engine with
// its durability logged.
func loopApplier(t *testing.T) (*Applier, *engine.Engine, *durabilityLog) {
	t.Helper()
	a, e := newApplier(t, 1000)
	l := engine.Local(e)
	d := &durabilityLog{Backend: l, MarkApplier: l.(engine.MarkApplier)}
	ap, err := NewApplier(d, a.Rules(), event.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ap.marks == nil {
		t.Fatal("the applier does not use the dedupe marks")
	}
	return ap, e, d
}

// streamPolls returns polls of msgs messages each (the last one short
// when short is set), spread over two partitions, each message holding
// perMsg view events of 3 posts, every 10th a copy of the event before;
// and the views each post must count.
func streamPolls(polls, msgs, perMsg int, short bool) ([][][]stream.Record, map[string]int64) {
	var out [][][]stream.Record
	views := map[string]int64{}
	off := map[int32]int64{}
	id := 0
	for p := range polls {
		n := msgs
		if short && p == polls-1 {
			n = msgs / 3
		}
		groups := make([][]stream.Record, 2)
		for m := range n {
			part := int32(m % 2)
			for i := range perMsg {
				if (id+i)%10 != 9 {
					id++
					views[fmt.Sprintf("p%d", id%3)]++
				}
				js := fmt.Sprintf(`{"id":"e%d","type":"view","ts":1,"post":"p%d","user":"u%d","country":"c%d"}`, id, id%3, id%7, id%2)
				groups[part] = append(groups[part], stream.Record{Partition: part, Offset: off[part], Index: int32(i), Value: []byte(js)})
			}
			off[part]++
		}
		out = append(out, groups)
	}
	return out, views
}

func runLoop(t *testing.T, a *Applier, f *fakeStream) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, a, f, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			t.Error(err)
		}
	}()
	return func() { cancel(); <-done }
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRunCommitsSeveralPolls: under a steady stream (full polls, always
// more waiting) Run applies several polls before one wait for durability
// and one commit of them all, within the uncommitted-messages cap; it
// never commits what is not durable, commits every record, and each
// event counts once.
func TestRunCommitsSeveralPolls(t *testing.T) {
	a, e, d := loopApplier(t)
	a.SetCommitInterval(time.Hour) // only the cap and the drained stream commit
	const polls = 13
	ps, views := streamPolls(polls, stream.PollMessages, 5, true)
	total, last := 0, map[int32]int64{}
	for _, p := range ps {
		for _, g := range p {
			total += len(g)
			for _, r := range g {
				last[r.Partition] = r.Offset
			}
		}
	}
	f := newFakeStream(t, d, ps)
	stop := runLoop(t, a, f)
	defer stop()
	waitFor(t, "every record committed", func() bool { _, n := f.committed(); return n == total })
	commits, _ := f.committed()
	// The full polls commit when the cap is reached, the short last one
	// at once: far fewer commits than polls.
	perCommit := MaxUncommittedMessages / stream.PollMessages
	if want := (polls-1+perCommit-1)/perCommit + 1; commits != want || perCommit < 2 {
		t.Errorf("%d polls made %d commits, want %d (%d full polls a commit)", polls, commits, want, perCommit)
	}
	d.mu.Lock()
	syncs := d.syncs
	d.mu.Unlock()
	if syncs != commits {
		t.Errorf("%d synced writes for %d commits, want one each", syncs, commits)
	}
	checkViews(t, e, views)
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, o := range last {
		if f.last[p] != o {
			t.Errorf("partition %d: last offset committed %d, want %d", p, f.last[p], o)
		}
	}
}

// TestRunIdleCommitsAtOnce: a poll that finds the stream drained (fewer
// messages than a full poll) is committed at once, whatever the
// interval; a full poll followed by nothing is committed when the
// interval ends, not when the next records come.
func TestRunIdleCommitsAtOnce(t *testing.T) {
	t.Run("short", func(t *testing.T) {
		a, e, d := loopApplier(t)
		a.SetCommitInterval(time.Hour)
		ps, views := streamPolls(1, 6, 3, false)
		f := newFakeStream(t, d, ps)
		stop := runLoop(t, a, f)
		defer stop()
		select {
		case <-f.commit:
		case <-time.After(20 * time.Second):
			t.Fatal("a short poll was not committed")
		}
		if c, n := f.committed(); c != 1 || n != 18 {
			t.Errorf("%d commits of %d records, want 1 of 18", c, n)
		}
		checkViews(t, e, views)
	})
	t.Run("full then nothing", func(t *testing.T) {
		a, e, d := loopApplier(t)
		const every = 150 * time.Millisecond
		a.SetCommitInterval(every)
		ps, views := streamPolls(1, stream.PollMessages, 2, false)
		f := newFakeStream(t, d, ps)
		began := time.Now()
		stop := runLoop(t, a, f)
		defer stop()
		<-f.drained
		select {
		case <-f.commit:
		case <-time.After(20 * time.Second):
			t.Fatal("a full poll on a stream gone quiet was not committed")
		}
		if el := time.Since(began); el < every {
			t.Errorf("committed after %v, before the interval %v ended", el, every)
		}
		if c, n := f.committed(); c != 1 || n != 2*stream.PollMessages {
			t.Errorf("%d commits of %d records, want 1 of %d", c, n, 2*stream.PollMessages)
		}
		checkViews(t, e, views)
	})
}

// TestRunCommitsAppliedAtStop: when Run's context ends while polls are
// applied but not committed, it makes them durable and commits them
// before it returns.
func TestRunCommitsAppliedAtStop(t *testing.T) {
	a, _, d := loopApplier(t)
	a.SetCommitInterval(time.Hour)
	ps, _ := streamPolls(2, stream.PollMessages, 2, false)
	f := newFakeStream(t, d, ps)
	stop := runLoop(t, a, f)
	<-f.drained
	if c, _ := f.committed(); c != 0 {
		t.Fatalf("%d commits before the stop, want none (two full polls, interval 1h)", c)
	}
	stop()
	if c, n := f.committed(); c != 1 || n != 2*2*stream.PollMessages {
		t.Errorf("at stop: %d commits of %d records, want 1 of %d", c, n, 2*2*stream.PollMessages)
	}
}
