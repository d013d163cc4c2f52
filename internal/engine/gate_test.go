package engine

import (
	"context"
	"testing"
	"time"
)

// A batch that panics under the flusher's gate (applyMultiIn does on a
// batch it can no longer undo) releases the gate: if something recovers
// the panic, the next flush still runs.
func TestUnderGateReleasesOnPanic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was lost")
			}
		}()
		_ = e.underGate(func() error { panic("a batch half applied") })
	}()
	done := make(chan error, 1)
	go func() { done <- e.Flush(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("flush after a recovered panic under the gate: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the flush is stuck behind a gate the panicking batch kept")
	}
}
