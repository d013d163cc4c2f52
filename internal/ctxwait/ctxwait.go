// Package ctxwait waits for a duration or a context, whichever ends first:
// the pause between retries shared by the stores, the pipeline and its
// consumer.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done: nil after d, ctx's error if it
// ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
