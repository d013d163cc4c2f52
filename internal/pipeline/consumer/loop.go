package consumer

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/pipeline/stream"
)

// Run polls c, applies each group with a, publishes the dead letters and
// commits, until ctx is done. Nothing is committed before it is applied
// (durably) and dead-lettered; on an error the same records are retried
// with backoff, never skipped. Run returns nil when ctx is done.
func Run(ctx context.Context, a *Applier, c stream.Consumer, log *slog.Logger) error {
	lagAt := time.Time{}
	var failingSince time.Time // first failed poll of an outage; zero while polls work
	for {
		groups, err := c.Poll(ctx)
		if ctx.Err() != nil {
			return nil
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
		if !retry(ctx, log, "apply", func() error {
			dead, err := a.applyTraced(bctx, c.Name(), groups)
			if err != nil {
				return err
			}
			for _, dl := range dead {
				if len(dl) == 0 {
					continue
				}
				for _, d := range dl {
					log.Debug("pipeline: dead letter", "pos", d.Record.Pos(), "reason", d.Reason)
				}
				if err := c.DeadLetter(ctx, dl); err != nil {
					return err
				}
			}
			return nil
		}) {
			return nil
		}
		if !retry(ctx, log, "commit", func() error { return c.Commit(ctx, groups) }) {
			return nil
		}
		endBatch()
		if now := time.Now(); now.Sub(lagAt) >= time.Second {
			lagAt = now
			for p, l := range c.Lag(ctx) {
				a.m.Lag.WithLabelValues(strconv.Itoa(int(p))).Set(float64(l))
			}
		}
	}
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
