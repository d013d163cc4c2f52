package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/ctxwait"
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
func Run(ctx context.Context, a *Applier, c stream.Consumer, log *slog.Logger) error {
	lagAt := time.Time{}
	var failingSince time.Time // first failed poll of an outage; zero while polls work
	var u uncommitted
	defer func() {
		if len(u.groups) > 0 {
			// Applied but not committed: commit it if it can be made
			// durable shortly, else its records are delivered again.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCommitTimeout)
			defer cancel()
			a.commitPolls(fctx, c, &u, log, true)
		}
	}()
	for {
		began := time.Now()
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if len(u.groups) > 0 {
			// Poll at most until the interval of the oldest uncommitted
			// poll ends, then commit.
			pctx, cancel = context.WithDeadline(ctx, u.since.Add(a.commitEvery))
		}
		groups, err := c.Poll(pctx)
		polled := time.Now()
		due := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && len(u.groups) > 0 {
			// The interval ended on a quiet stream, or the poll failed:
			// commit what was applied first.
			if !a.commitPolls(ctx, c, &u, log, false) {
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
		msgs := u.add(groups, dead, endBatch, applied, polled)
		// Commit now if one more poll like this one would take the
		// oldest past the interval: so the records wait at most about
		// the interval, and with the interval at the engine's flush
		// period the commit's flush comes before the periodic one, which
		// then has nothing to add (its timer restarts at every flush).
		now := time.Now()
		if a.commitEvery <= 0 || now.Sub(u.since)+now.Sub(began) >= a.commitEvery || msgs < stream.PollMessages ||
			u.msgs >= MaxUncommittedMessages || u.bytes >= maxUncommittedBytes {
			if !a.commitPolls(ctx, c, &u, log, false) {
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
	clear(u.groups) // no hold on the records
	clear(u.dead)
	clear(u.ends)
	*u = uncommitted{groups: u.groups[:0], dead: u.dead[:0], ends: u.ends[:0]}
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
