package engine

import (
	"fmt"
	"github.com/counterd/counterd/internal/contract"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdempotencyRecordAndEffectCrashTogether: an idempotency record must
// reach disk in the same batch as the change it describes. Writers send
// idempotent increments (each key once, each +1) while flushes run; the
// disk "loses power" at an arbitrary point; after reopening, every key is
// retried. If a record ever reached disk without its effect, its retry is
// replayed and the count is short; if an effect reached disk without its
// record, its retry applies again and the count is over. Either way the
// value differs from the number of keys.
func TestIdempotencyRecordAndEffectCrashTogether(t *testing.T) {
	for round := 0; round < 5; round++ {
		fs := strictMemDir(t, "/data")
		cfg := DefaultConfig()
		cfg.Dir, cfg.FS = "/data", fs
		cfg.FlushInterval = time.Millisecond
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var sent atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					n := sent.Add(1)
					id := fmt.Sprintf("c%d", n%3) // several keys share a counter
					if _, err := e.Add(bg, id, 1, contract.WriteOptions{IdempotencyKey: fmt.Sprint("k", n)}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for sent.Load() < int64(500*(round+1)) {
			time.Sleep(time.Millisecond)
		}
		fs.SetIgnoreSyncs(true) // power loss: nothing from here on is durable
		close(stop)
		wg.Wait()
		e = reopenAfterPowerLoss(t, e, fs, cfg)
		total := sent.Load()
		for n := int64(1); n <= total; n++ {
			if _, err := e.Add(bg, fmt.Sprintf("c%d", n%3), 1, contract.WriteOptions{IdempotencyKey: fmt.Sprint("k", n)}); err != nil {
				t.Fatal(err)
			}
		}
		var sum int64
		for i := 0; i < 3; i++ {
			sum += mustGet(t, e, fmt.Sprintf("c%d", i)).Value
		}
		e.Close()
		if sum != total {
			t.Fatalf("round %d: counters sum to %d after retrying %d idempotent increments once each", round, sum, total)
		}
	}
}
