package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/counterd/counterd/client"
)

// counterctl limit KEY --limit N [--period D] [--algorithm A] [--cost C] [--burst B]
func setupLimit(fs *flag.FlagSet) runFunc {
	limit := fs.Int64("limit", 0, "hits allowed per period (required)")
	period := fs.Duration("period", time.Minute, "window or refill period")
	algorithm := fs.String("algorithm", "sliding_window", "fixed_window, sliding_window, sliding_log, token_bucket or leaky_bucket")
	cost := fs.Int64("cost", 1, "hits this check consumes (0: only look)")
	burst := fs.Int64("burst", 0, "bucket capacity for token_bucket and leaky_bucket (0: the limit)")
	return func(ctx context.Context, e *env, args []string) error {
		if *limit <= 0 {
			return usagef("--limit must be positive")
		}
		if *period <= 0 {
			return usagef("--period must be positive")
		}
		if *cost < 0 {
			return usagef("--cost must not be negative")
		}
		c := e.c
		d, err := c.CheckLimit(ctx, args[0], *cost, client.Limit{Algorithm: *algorithm, Limit: *limit, Period: *period, Burst: *burst})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, d)
		}
		if d.Allowed {
			_, err = fmt.Fprintf(e.stdout, "allowed  %d of %d left, %s\n", d.Remaining, d.Limit, fullAgain(*algorithm, *period, d))
		} else {
			_, err = fmt.Fprintf(e.stdout, "denied  retry after %v (%d of %d left)\n", time.Duration(d.RetryAfterMS)*time.Millisecond, d.Remaining, d.Limit)
		}
		return err
	}
}

// fullAgain says when all of a limit is available again (the decision's
// reset). A sliding window's hits weigh on the window after theirs too, so
// its reset may be up to two periods away: say why rather than print a
// reset longer than the period unexplained.
func fullAgain(algorithm string, period time.Duration, d *client.LimitDecision) string {
	reset := time.Duration(d.ResetMS) * time.Millisecond
	if reset == 0 {
		return "all available"
	}
	shown := reset
	if shown > time.Second {
		shown = shown.Round(time.Second)
	}
	msg := fmt.Sprintf("all %d available again in %v", d.Limit, shown)
	if strings.EqualFold(algorithm, "sliding_window") && reset > period {
		msg += fmt.Sprintf(" (sliding window: hits count, less and less, until the end of the %v window after theirs)", period)
	}
	return msg
}
