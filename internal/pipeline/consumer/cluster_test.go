package consumer

import (
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/pipeline/event"
)

// TestNewApplierRefuses: backends whose batches are not atomic (the
// cluster, atomic per owner; the tiered store, undone by inverse ops) are
// refused with the reason.
func TestNewApplierRefuses(t *testing.T) {
	_, e := newApplier(t, 10)
	for _, c := range []struct {
		mode    string
		batches contract.BatchAtomicity
	}{{"cluster", contract.BatchAtomicPerOwner}, {"tiered", contract.BatchUndoInverse}} {
		be := capsBackend{Backend: engine.Local(e), mode: c.mode, batches: c.batches}
		if _, err := NewApplier(be, nil, event.Limits{}, nil); err == nil {
			t.Errorf("%s batches accepted", c.mode)
		}
	}
}

type capsBackend struct {
	contract.Backend
	mode    string
	batches contract.BatchAtomicity
}

func (b capsBackend) Capabilities() contract.Capabilities {
	c := b.Backend.Capabilities()
	c.Mode, c.Batches = b.mode, b.batches
	return c
}
