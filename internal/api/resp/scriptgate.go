package resp

import (
	"context"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/contract"
)

// ErrScriptBusy answers a write through GateWrites's backend while a
// script has run past the time limit (Redis's BUSY); it wraps
// contract.ErrUnavailable, so the HTTP API answers 503 and clients retry.
var ErrScriptBusy = fmt.Errorf("%w: busy running a script (resp: past --lua-time-limit)", contract.ErrUnavailable)

// GateWrites returns be with its writes (Apply, ApplyBatch, FlushAll)
// behind this server's script gate: each holds the gate's shared side
// while it runs, like a Redis-protocol data command, so it does not land
// between the commands of a script (or of an EXEC that holds the gate
// exclusively) on this node. The HTTP API's backend goes through it
// (internal/server). With no script running the cost is a read lock
// taken and released; while one runs a write waits for it, and once the
// script is past the time limit it fails with ErrScriptBusy, as a
// client's command would get BUSY. Reads are not held back (they may
// see a script's writes before the script ends).
//
// be must not be the backend the server itself runs commands on: a
// script's own commands would wait for the gate their script holds.
func (s *Server) GateWrites(be contract.Backend) contract.Backend {
	return gatedBackend{Backend: be, sc: s.lua}
}

type gatedBackend struct {
	contract.Backend
	sc *scripting
}

// rlock takes the gate's shared side for a write of another front end:
// at once when no script holds it, else when the script (or exclusive
// EXEC) releases it, or ErrScriptBusy once the script is past the time
// limit, or ctx's error.
func (sc *scripting) rlock(ctx context.Context) error {
	for {
		if sc.gate.TryRLock() {
			return nil
		}
		// TryRLock failed: a holder has stored its done channel (lock
		// does before it takes the gate). A stale, closed one only makes
		// this loop try again.
		wait := sc.limit
		if st := sc.start.Load(); st != 0 {
			if wait -= time.Duration(nanotime() - st); wait <= 0 {
				return ErrScriptBusy
			}
		}
		var done <-chan struct{} // nil (never set) only waits for the timer
		if p := sc.done.Load(); p != nil {
			done = *p
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
		case <-t.C: // past the limit, or the holder was not a script yet: check again
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

func (g gatedBackend) Apply(ctx context.Context, op contract.Op, wo contract.WriteOptions) (contract.Result, error) {
	if err := g.sc.rlock(ctx); err != nil {
		return contract.Result{}, err
	}
	defer g.sc.gate.RUnlock()
	return g.Backend.Apply(ctx, op, wo)
}

func (g gatedBackend) ApplyBatch(ctx context.Context, ops []contract.Op, wo contract.WriteOptions) ([]contract.Result, error) {
	if err := g.sc.rlock(ctx); err != nil {
		return nil, err
	}
	defer g.sc.gate.RUnlock()
	return g.Backend.ApplyBatch(ctx, ops, wo)
}

func (g gatedBackend) FlushAll(ctx context.Context, wo contract.WriteOptions) error {
	if err := g.sc.rlock(ctx); err != nil {
		return err
	}
	defer g.sc.gate.RUnlock()
	return g.Backend.FlushAll(ctx, wo)
}
