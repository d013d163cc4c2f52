package engine

import (
	"context"
	"errors"
	"github.com/counterd/counterd/internal/contract"
	"testing"
)

// TestApplyAtomic: all ops or none (a failing op is a *BatchError naming
// it, and the ops before it are undone), no idempotency record, and more
// ops than MaxBatch.
func TestApplyAtomic(t *testing.T) {
	e := openMem(t, func(c *Config) { c.MaxBatch = 2 })
	ctx := context.Background()
	ops := []contract.Op{
		{Type: contract.OpAdd, ID: "a", Delta: 1},
		{Type: contract.OpSet, ID: "m1", Value: 1, CheckVersion: true},
		{Type: contract.OpAdd, ID: "b", Delta: 2},
	}
	if err := e.ApplyAtomic(ctx, ops, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// m1 exists now: the same batch again fails at op 1 and changes nothing.
	err := e.ApplyAtomic(ctx, ops, contract.WriteOptions{})
	var be *contract.BatchError
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, contract.ErrVersionConflict) {
		t.Fatalf("second apply: %v, want a version conflict at op 1", err)
	}
	for id, want := range map[string]int64{"a": 1, "b": 2, "m1": 1} {
		if v, err := e.Get(id); err != nil || v.Value != want {
			t.Errorf("%s = %d (%v), want %d", id, v.Value, err, want)
		}
	}
	if n := e.idem.size(); n != 0 {
		t.Errorf("%d idempotency records, want none", n)
	}
	if err := e.ApplyAtomic(ctx, nil, contract.WriteOptions{}); !errors.Is(err, contract.ErrInvalidArgument) {
		t.Errorf("empty batch: %v", err)
	}
	if err := e.ApplyAtomic(ctx, []contract.Op{{Type: contract.OpAdd, ID: ""}}, contract.WriteOptions{}); !errors.As(err, &be) || be.Index != 0 {
		t.Errorf("invalid op: %v", err)
	}
}
