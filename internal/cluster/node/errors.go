package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
)

// ErrWrongOwner is answered to a forwarded request for an id the receiver
// does not own in its ring: the sender refreshes and retries once instead
// of the receiver forwarding again (one hop, no loops). It wraps
// contract.ErrUnavailable, so a request that still fails after the retry is a
// retryable 503 / TRYAGAIN.
var ErrWrongOwner = fmt.Errorf("cluster: wrong owner: %w", contract.ErrUnavailable)

// WrongOwnerError says who the receiver believes owns the id.
type WrongOwnerError struct {
	ID          string
	Owner       string // the receiver's owner for ID ("" if unknown)
	RingVersion uint64 // the receiver's ring version
}

func (e *WrongOwnerError) Error() string {
	return fmt.Sprintf("%v: %q is owned by %q (ring v%d)", ErrWrongOwner, e.ID, e.Owner, e.RingVersion)
}

func (e *WrongOwnerError) Unwrap() error { return ErrWrongOwner }

// UnavailableError is a peer that could not be reached, or a write that did
// not reach its quorum. It unwraps to contract.ErrUnavailable (HTTP 503,
// RESP TRYAGAIN) and to the cause.
type UnavailableError struct {
	Node string // the peer, or "" for a quorum failure
	Op   string
	Err  error
}

func (e *UnavailableError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("%v: %s: %v", contract.ErrUnavailable, e.Op, e.Err)
	}
	return fmt.Sprintf("%v: %s on node %q: %v", contract.ErrUnavailable, e.Op, e.Node, e.Err)
}

func (e *UnavailableError) Unwrap() []error { return []error{contract.ErrUnavailable, e.Err} }

// wireError carries an engine error across a peer call, keeping its
// sentinel so front ends map it as if it had happened locally.
type wireError struct {
	Code  string `json:"code"`
	Msg   string `json:"msg"`
	Index int    `json:"index"` // batch op index, -1 if none
	Owner string `json:"owner,omitempty"`
	Ring  uint64 `json:"ring,omitempty"`
	ID    string `json:"id,omitempty"`
	// Quota is the refusal of a quota (code quota_exceeded), so that the
	// caller's front ends name the quota and its limit as the owner's
	// would.
	Quota *quota.ExceededError `json:"quota,omitempty"`
}

// sentinels maps wire codes to errors; order matters (first match wins).
var sentinels = []struct {
	code string
	err  error
}{
	{"wrong_owner", ErrWrongOwner},
	{"invalid_id", contract.ErrInvalidID},
	{"too_late", engine.ErrTooLate},   // with invalid_argument (decoded as both)
	{"too_early", engine.ErrTooEarly}, // the same
	{"invalid_argument", contract.ErrInvalidArgument},
	{"wrong_kind", contract.ErrWrongKind},
	{"overflow", contract.ErrOverflow},
	{"not_float", contract.ErrNotFloat},
	{"float_range", contract.ErrFloatRange},
	{"not_integer", contract.ErrNotInteger},
	{"version_conflict", contract.ErrVersionConflict},
	{"not_found", contract.ErrNotFound},
	{"batch_too_large", contract.ErrBatchTooLarge},
	{"idempotency_reuse", contract.ErrIdempotencyReuse},
	{"quota_exceeded", contract.ErrQuotaExceeded},
	{"closed", contract.ErrClosed},
	{"insufficient_storage", contract.ErrInsufficientStorage},
	{"unavailable", contract.ErrUnavailable},
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
}

// toWire encodes err (nil for nil).
func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Code: "internal", Msg: err.Error(), Index: -1}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			w.Code = s.code
			break
		}
	}
	var be *contract.BatchError
	if errors.As(err, &be) {
		w.Index = be.Index
		w.Msg = be.Err.Error()
	}
	var wo *WrongOwnerError
	if errors.As(err, &wo) {
		w.Owner, w.Ring, w.ID = wo.Owner, wo.RingVersion, wo.ID
	}
	var qe *quota.ExceededError
	if errors.As(err, &qe) {
		c := *qe
		w.Quota = &c
	}
	return w
}

// remoteError is an error that happened on a peer; it unwraps to the
// sentinel named by its wire code.
type remoteError struct {
	node     string
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg + " (on node " + e.node + ")" }
func (e *remoteError) Unwrap() error { return e.sentinel }

// err decodes w as returned by node; index maps a batch index back to the
// caller's numbering (nil: unchanged).
func (w *wireError) err(node string, index func(int) int) error {
	if w == nil {
		return nil
	}
	if w.Code == "wrong_owner" {
		return &WrongOwnerError{ID: w.ID, Owner: w.Owner, RingVersion: w.Ring}
	}
	var err error = &remoteError{node: node, msg: w.Msg, sentinel: errors.New(w.Msg)}
	for _, s := range sentinels {
		if s.code == w.Code {
			sentinel := s.err
			if s.err == engine.ErrTooLate || s.err == engine.ErrTooEarly {
				sentinel = fmt.Errorf("%w: %w", contract.ErrInvalidArgument, s.err)
			}
			err = &remoteError{node: node, msg: w.Msg, sentinel: sentinel}
			break
		}
	}
	if w.Code == "quota_exceeded" && w.Quota != nil {
		// The quota's refusal itself (errors.As finds its name and limit;
		// it is errors.Is contract.ErrQuotaExceeded).
		c := *w.Quota
		err = &remoteError{node: node, msg: w.Msg, sentinel: &c}
	}
	if w.Index >= 0 {
		i := w.Index
		if index != nil {
			i = index(i)
		}
		err = &contract.BatchError{Index: i, Err: err}
	}
	return err
}

var (
	errEmptyRequest = fmt.Errorf("%w: empty peer request", contract.ErrInvalidArgument)
	errUnknownOp    = fmt.Errorf("%w: unknown peer operation", contract.ErrInvalidArgument)
	errRingChanged  = fmt.Errorf("%w: the ring changed during the operation", contract.ErrUnavailable)
	errNotJoined    = fmt.Errorf("%w: not joined to the cluster yet", contract.ErrUnavailable)
	errMinority     = fmt.Errorf("%w: this node sees at most half of the cluster (partition or failures); owner writes are refused", contract.ErrUnavailable)
)

func isWrongOwner(err error) bool { return errors.Is(err, ErrWrongOwner) }

// remapBatchError renumbers a batch error of a part of a split batch to the
// index of the op in the whole batch.
func remapBatchError(err error, idx []int) error {
	var be *contract.BatchError
	if err == nil || !errors.As(err, &be) || be.Index < 0 || be.Index >= len(idx) {
		return err
	}
	return &contract.BatchError{Index: idx[be.Index], Err: be.Err}
}
