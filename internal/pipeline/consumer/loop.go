package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// DefaultCommitInterval is how long Run goes on applying polls before it
// waits for their durability and commits them (--events-commit-interval):
// the engine's default flush period, so that a steady stream costs about
// one flush a second, not one a poll.
const DefaultCommitInterval = time.Second

// The most Run holds applied and uncommitted: stream messages (below the
// JetStream consumer's stream.MaxAckPending, which the nodes share) and
// bytes of records (what the polls keep in memory).
const (
	MaxUncommittedMessages = 4 * stream.PollMessages
	maxUncommittedBytes    = 64 << 20
)

// finalCommitTimeout bounds the commit of what was applied when Run's
// context ends.
const finalCommitTimeout = 5 * time.Second

// SetCommitInterval sets how long Run applies polls before one wait for
// their durability and one commit (default DefaultCommitInterval; zero
// or less: every poll). Set before Run starts.
func (a *Applier) SetCommitInterval(d time.Duration) { a.commitEvery = max(d, 0) }

// uncommitted is what Run applied and has not committed yet: the groups
// of one or more polls, in poll order.
type uncommitted struct {
	groups  [][]stream.Record
	dead    [][]stream.DeadLetter // dead[i]: of groups[i]
	ends    []func()              // the polls' trace spans
	since   time.Time             // when the oldest poll returned
	msgs    int
	bytes   int
	applied bool // an engine batch went in: wait for durability
	// fw, when set, is the engine flush that makes every batch applied
	// in these polls durable (handToFlush): no wait of their own.
	fw engine.FlushWait
	// flushing: fw is set.
	flushing bool
}

// add adds a poll's groups, returned at polled, and returns how many
// stream messages they are.
func (u *uncommitted) add(groups [][]stream.Record, dead [][]stream.DeadLetter, end func(), applied bool, polled time.Time) int {
	if len(u.groups) == 0 {
		u.since = polled
	}
	msgs := stream.Messages(groups)
	u.groups = append(u.groups, groups...)
	u.dead = append(u.dead, dead...)
	u.ends = append(u.ends, end)
	u.msgs += msgs
	for _, g := range groups {
		for i := range g {
			u.bytes += len(g[i].Value)
		}
	}
	u.applied = u.applied || applied
	return msgs
}

// merge appends v's polls to u's and empties v; u waits for durability
// with a sync write.
func (u *uncommitted) merge(v *uncommitted) {
	if len(u.groups) == 0 {
		u.since = v.since
	}
	u.groups = append(u.groups, v.groups...)
	u.dead = append(u.dead, v.dead...)
	u.ends = append(u.ends, v.ends...)
	u.msgs += v.msgs
	u.bytes += v.bytes
	u.applied = u.applied || v.applied
	u.flushing = false
	v.reset()
}

// reset empties u, keeping its slices.
func (u *uncommitted) reset() {
	clear(u.groups) // no hold on the records
	clear(u.dead)
	clear(u.ends)
	*u = uncommitted{groups: u.groups[:0], dead: u.dead[:0], ends: u.ends[:0]}
}

// flushed reports whether u waits for an engine flush that has ended.
func (u *uncommitted) flushed() bool {
	if !u.flushing {
		return false
	}
	select {
	case <-u.fw.Done():
		return true
	default:
		return false
	}
}

// Run polls c, applies each poll with a, and every commit interval
// (SetCommitInterval) waits once for the durability of what it applied,
// publishes the dead letters and commits all the polls since the last
// commit, until ctx is done. It commits at once, without waiting for the
// interval, after a poll that found the stream drained (fewer than
// stream.PollMessages messages: latency stays low on a quiet stream) and
// when the uncommitted records reach MaxUncommittedMessages messages or
// 64 MiB. Nothing is committed before it is applied durably and
// dead-lettered; on an error the same records are retried with backoff,
// never skipped. When ctx ends, what was applied is committed (within
// finalCommitTimeout) and Run returns nil.
//
// On the embedded engine (engine.FlushWaiter) and a stream that commits
// some of its polls at a time (stream.PollCommitter), the polls do not
// wait for a flush of their own when the engine's periodic one comes
// within the interval: each is handed to the engine's next flush
// (Engine.NextFlush) and Run goes on applying; the polls a flush made
// durable are committed when it ends (handToFlush, commitFlushed).
func Run(ctx context.Context, a *Applier, c stream.Consumer, log *slog.Logger) error {
	lagAt := time.Time{}
	var failingSince time.Time // first failed poll of an outage; zero while polls work
	// w: older polls than u's, handed to an engine flush that has started
	// (flushing); committed when it ends, before u's.
	var u, w uncommitted
	fws := a.flushWaits(c)
	defer func() {
		if len(w.groups)+len(u.groups) > 0 {
			// Applied but not committed: commit it if it can be made
			// durable shortly, else its records are delivered again.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCommitTimeout)
			defer cancel()
			w.merge(&u)
			a.commitPolls(fctx, c, &w, log, true)
		}
	}()
	for {
		if !a.commitFlushed(ctx, c, &w, &u, log) {
			return nil
		}
		began := time.Now()
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if old := oldest(&w, &u); old != nil {
			// Poll at most until the interval of the oldest uncommitted
			// poll ends, or its flush does, then commit.
			pctx, cancel = context.WithDeadline(ctx, a.deadline(&w, &u))
			if old.flushing {
				go func(done, polled <-chan struct{}) {
					select {
					case <-done:
						cancel()
					case <-polled:
					}
				}(old.fw.Done(), pctx.Done())
			}
		}
		groups, err := c.Poll(pctx)
		polled := time.Now()
		due := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && len(w.groups)+len(u.groups) > 0 {
			if due && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && oldest(&w, &u).flushed() {
				continue // committed at the top of the loop
			}
			// The interval ended on a quiet stream, or the poll failed:
			// commit what was applied first.
			w.merge(&u)
			if !a.commitPolls(ctx, c, &w, log, false) {
				return nil
			}
			if due && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				continue
			}
		}
		if err != nil {
			// An outage is logged once when it starts and once when it
			// ends, not per poll: the loop keeps polling every second.
			if failingSince.IsZero() {
				failingSince = time.Now()
				log.Warn("pipeline: consumer cannot poll the stream, retrying every second", "stream", c.Name(), "err", err)
			} else {
				log.Debug("pipeline: poll", "stream", c.Name(), "err", err)
			}
			if ctxwait.Sleep(ctx, time.Second) != nil {
				return nil
			}
			continue
		}
		if !failingSince.IsZero() {
			log.Info("pipeline: consumer polling again", "stream", c.Name(), "after", time.Since(failingSince).Round(time.Millisecond))
			failingSince = time.Time{}
		}
		bctx, endBatch := a.traceBatch(ctx, c.Name(), groups) // tracing.go
		var dead [][]stream.DeadLetter
		applied := false
		if !retry(ctx, log, "apply", func() (err error) {
			dead, applied, err = a.applyTraced(bctx, c.Name(), groups)
			return err
		}) {
			return nil // (this poll is not in u: never committed)
		}
		if fws != nil && applied {
			if !a.handToFlush(ctx, fws, c, groups, &w, &u, log) {
				return nil
			}
		}
		msgs := u.add(groups, dead, endBatch, applied, polled)
		if !a.commitFlushed(ctx, c, &w, &u, log) {
			return nil
		}
		// Commit now if one more poll like this one would take the
		// oldest past the interval: so the records wait at most about
		// the interval, and with the interval at the engine's flush
		// period the commit's flush comes before the periodic one, which
		// then has nothing to add (its timer restarts at every flush).
		// Polls waiting for an engine flush are committed when it ends,
		// with a sync write only if it has not come a commit interval
		// after it was due.
		now := time.Now()
		if a.commitEvery <= 0 || a.overdue(&w, now, began) || a.overdue(&u, now, began) || msgs < stream.PollMessages ||
			w.msgs+u.msgs >= MaxUncommittedMessages || w.bytes+u.bytes >= maxUncommittedBytes {
			w.merge(&u)
			if !a.commitPolls(ctx, c, &w, log, false) {
				return nil
			}
		}
		if now.Sub(lagAt) >= time.Second {
			lagAt = now
			for p, l := range c.Lag(ctx) {
				a.m.Lag.WithLabelValues(strconv.Itoa(int(p))).Set(float64(l))
			}
		}
	}
}

// oldest returns w if it holds polls, else u if it does, else nil.
func oldest(w, u *uncommitted) *uncommitted {
	switch {
	case len(w.groups) > 0:
		return w
	case len(u.groups) > 0:
		return u
	}
	return nil
}

// flushWaits returns a's engine flushes when Run may wait for them
// instead of a sync write: the backend is the embedded engine, the
// stream commits some polls at a time, and there is a commit interval.
func (a *Applier) flushWaits(c stream.Consumer) engine.FlushWaiter {
	if _, ok := c.(stream.PollCommitter); !ok || a.flushes == nil || a.commitEvery <= 0 {
		return nil
	}
	return a.flushes
}

// deadline is when Run commits w's and u's polls (one of them holds
// some) with a sync write: the commit interval after the oldest poll;
// for polls waiting for an engine flush, the interval after the flush
// was due (it ends its duration after it starts, and started within the
// interval of the polls' hand-over).
func (a *Applier) deadline(w, u *uncommitted) time.Time {
	var t time.Time
	for _, v := range []*uncommitted{w, u} {
		if len(v.groups) == 0 {
			continue
		}
		if dt := a.deadlineOf(v); t.IsZero() || dt.Before(t) {
			t = dt
		}
	}
	return t
}

func (a *Applier) deadlineOf(v *uncommitted) time.Time {
	if v.flushing {
		return v.fw.Due().Add(a.commitEvery)
	}
	return v.since.Add(a.commitEvery)
}

// overdue reports whether v's polls are to be committed with a sync write
// now, after a poll that began at began: v's deadline has passed, or one
// more poll like that one would take v past it when v does not wait for
// an engine flush.
func (a *Applier) overdue(v *uncommitted, now, began time.Time) bool {
	if len(v.groups) == 0 {
		return false
	}
	if v.flushing {
		return !now.Before(a.deadlineOf(v))
	}
	return !now.Add(now.Sub(began)).Before(a.deadlineOf(v))
}

// handToFlush hands the poll of groups, just applied, to the engine's next
// flush, before Run adds it to u: it writes the poll's progress counters
// (async) and takes the flush, which covers the poll and every one before
// it. When u's polls wait for an older flush, that one has started: they
// move to w (whose own flush has ended: committed first). u's polls go on
// waiting for a flush (u.flushing) only while the next one comes within
// the commit interval and nothing failed; else they are committed with a
// sync write, as without flush waits. False when ctx ended.
func (a *Applier) handToFlush(ctx context.Context, fws engine.FlushWaiter, c stream.Consumer, groups [][]stream.Record, w, u *uncommitted, log *slog.Logger) bool {
	err := a.writeProgress(ctx, c.Name(), groups, contract.Async)
	fw := fws.NextFlush()
	if u.flushing && !u.fw.Same(fw) {
		if len(w.groups) > 0 {
			// w's flush ended before u's started.
			if !a.commitFlushed(ctx, c, w, nil, log) {
				return false
			}
			if len(w.groups) > 0 {
				w.merge(u) // (its flush failed: a sync write for both)
				return true
			}
		}
		*w, *u = *u, *w
		u.reset()
	}
	if len(u.groups) > 0 && !u.flushing && u.applied {
		return true // a sync write for u's polls, so for this one too
	}
	u.flushing = err == nil && time.Until(fw.Due()) <= a.commitEvery
	u.fw = fw
	return true
}

// commitFlushed commits w's polls if the flush they wait for ended, then
// u's if w holds none (u may be nil). A failed flush leaves the polls to
// a sync write, retried. False when ctx ended first.
func (a *Applier) commitFlushed(ctx context.Context, c stream.Consumer, w, u *uncommitted, log *slog.Logger) bool {
	for _, v := range []*uncommitted{w, u} {
		if v == nil || len(v.groups) == 0 {
			continue
		}
		if !v.flushed() {
			return true
		}
		if v.fw.Err() == nil {
			a.m.DurableWaits.Inc()
			v.applied = false // durable
		}
		v.flushing = false
		if !a.commitPolls(ctx, c, v, log, false) {
			return false
		}
	}
	return true
}

// commitPolls waits for the durability of u's polls, publishes their dead
// letters and commits them, retrying each step until it succeeds (once
// only when once is set); false when ctx ended first, and u is kept.
func (a *Applier) commitPolls(ctx context.Context, c stream.Consumer, u *uncommitted, log *slog.Logger, once bool) bool {
	do := func(what string, fn func() error) bool {
		if once {
			err := fn()
			if err != nil {
				log.Warn("pipeline: "+what+" failed at stop; the records after the last commit will be delivered again", "err", err)
			}
			return err == nil
		}
		return retry(ctx, log, what, fn)
	}
	if u.applied && !do("wait for durability", func() error { return a.waitDurable(ctx, c.Name(), u.groups) }) {
		return false
	}
	u.applied = false // durable: a retried step below need not wait again
	if !do("dead letters", func() error {
		for i, dl := range u.dead {
			if len(dl) == 0 {
				continue
			}
			for _, d := range dl {
				log.Debug("pipeline: dead letter", "pos", d.Record.Pos(), "reason", d.Reason)
			}
			if err := c.DeadLetter(ctx, dl); err != nil {
				return err
			}
			u.dead[i] = nil // published: not again on a retry
		}
		return nil
	}) {
		return false
	}
	if !do("commit", func() error { return c.Commit(ctx, u.groups) }) {
		return false
	}
	a.m.Commits.Inc()
	for _, end := range u.ends {
		end()
	}
	u.reset()
	return true
}

// retry runs fn until it succeeds or ctx is done (false), logging each
// failure once per backoff step (50ms doubling to 5s).
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) bool {
	wait := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("pipeline: "+what+" failed, retrying", "err", err, "in", wait)
		if ctxwait.Sleep(ctx, wait) != nil {
			return false
		}
		wait = min(2*wait, 5*time.Second)
	}
}
