package idem

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"sync/atomic"
	"time"
)

// Store is where a backend keeps records; Do runs the state machine over
// it. Every method gets the key in rec.Key.
type Store[R Outcome[R]] interface {
	// Claim makes claim (a pending record) the key's record unless it has
	// one; it returns the record it has (nil: claimed). A record past the
	// retention counts as none.
	Claim(ctx context.Context, claim *Record[R]) (held *Record[R], err error)
	// Wait returns when held, another request's pending claim, may have
	// ended (or ctx did).
	Wait(ctx context.Context, held *Record[R]) error
	// Commit applies the request (a store is made per request, or told
	// what to apply) and, if it succeeds, stores claim.Done(results) in
	// place of claim, as atomically with the effect as the store can (the
	// engine: in the same flush batch). An error is the apply's: nothing
	// was applied. A record that cannot be stored after the apply is the
	// store's to report (logged); the results stand.
	Commit(ctx context.Context, claim *Record[R]) ([]R, error)
	// Release removes claim if it is still the key's record (apply
	// failed, or the claim was abandoned).
	Release(ctx context.Context, claim *Record[R]) error
}

// Request is one keyed request.
type Request struct {
	Key string
	FP  uint64
	// Now is the time (unix ns) the request's records are created at.
	Now int64
	// Lease bounds how long the claim may be held (Deadline = Now+Lease);
	// zero: the store's claims are local to the process (no deadline).
	Lease time.Duration
	// Owner names this process on claims (see Active).
	Owner string
	// Clock returns the time (unix ns) a claim's deadline is checked
	// against; nil: the wall clock.
	Clock func() int64
}

// Active is the set of claims one process is running now: a pending record
// that names this process as its Owner but is not active was abandoned (its
// release failed), so a retry need not wait for its Deadline.
type Active interface {
	Running(claim string) bool
}

// Do applies a keyed request at most once: it claims the key, replays the
// record already there (ErrReuse for a different request), waits for
// another request's claim, takes over an abandoned claim, or applies
// through s.Commit, which records the results. The replayed results have
// AsReplayed applied; active may be nil. A claim carries a token (and
// Owner, Deadline) only when q.Owner is set: a store local to one process
// tells claims apart by pointer.
func Do[R Outcome[R]](ctx context.Context, s Store[R], q Request, active Active) ([]R, error) {
	claim := &Record[R]{Key: q.Key, FP: q.FP, Created: q.Now, Pending: true}
	if q.Owner != "" {
		claim.Claim, claim.Owner = NewClaim(), q.Owner
	}
	if q.Lease > 0 {
		claim.Deadline = q.Now + int64(q.Lease)
	}
	for {
		held, err := s.Claim(ctx, claim)
		if err != nil {
			return nil, err
		}
		if held == nil {
			break
		}
		if !held.Pending || held.FP != q.FP {
			return held.Replay(q.Key, q.FP)
		}
		if held == claim || held.Claim != "" && held.Claim == claim.Claim {
			break // our claim, resent by the store's client after it applied
		}
		if abandoned(held, q, active) {
			if err := s.Release(ctx, held); err != nil {
				return nil, err
			}
			continue
		}
		if err := s.Wait(ctx, held); err != nil {
			return nil, err
		}
	}
	res, err := s.Commit(ctx, claim)
	if err != nil {
		_ = s.Release(context.WithoutCancel(ctx), claim) // nothing applied: the key is free again (a failure leaves an abandoned claim)
		return nil, err
	}
	return res, nil
}

// Done is the record of claim's request completed with res.
func (r *Record[R]) Done(res []R) Record[R] {
	return Record[R]{Key: r.Key, FP: r.FP, Created: r.Created, Results: res}
}

// abandoned reports whether held, another request's pending claim, will
// never complete: its owner is this process and no longer runs it, or its
// deadline passed.
func abandoned[R Outcome[R]](held *Record[R], q Request, active Active) bool {
	if held.Owner != "" && held.Owner == q.Owner && active != nil && !active.Running(held.Claim) {
		return true
	}
	now := time.Now().UnixNano()
	if q.Clock != nil {
		now = q.Clock()
	}
	return held.Deadline > 0 && now > held.Deadline
}

// NewClaim returns a token naming one request's claim on a key, unique
// across processes: a random prefix drawn once per process and a counter
// (a variable so tests can fix it).
var NewClaim = func() string {
	return claimPrefix + strconv.FormatUint(claimSeq.Add(1), 36)
}

var (
	claimPrefix = newProcessID()
	claimSeq    atomic.Uint64
)

// ProcessID names this process as a claims' Owner.
func ProcessID() string { return claimPrefix }

func newProcessID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:]) + "."
}
