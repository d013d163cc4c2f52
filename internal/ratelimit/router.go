package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/shed"
	"github.com/counterd/counterd/internal/tracing"
)

// ForwardedHeader marks a check that a Router forwarded to the owner of its
// key. The HTTP handler decides such a check with its local Limiter and
// never forwards it again, so a check makes at most one hop even while two
// nodes disagree about who owns a key.
const ForwardedHeader = "Counterd-Forwarded"

// Fallback is what a Router does when the owner of a key cannot be reached.
type Fallback uint8

const (
	// FallbackLocal decides the check on this node (the default). The
	// decision is approximate: while k nodes decide a key independently
	// (the owner down or partitioned away), up to k x Limit units pass per
	// window (k x Burst at once for the buckets, then k times the rate).
	FallbackLocal Fallback = iota
	// FallbackError fails the check with ErrOwnerUnavailable: HTTP 503,
	// gRPC Unavailable, and the middleware lets the request pass.
	FallbackError
)

// Defaults of RouterConfig.
const (
	DefaultForwardTimeout = 500 * time.Millisecond
	DefaultDownFor        = time.Second
)

// RouterConfig configures NewRouter.
type RouterConfig struct {
	// Owner reports who owns key: this node (self), or else the HTTP
	// address of the owner ("host:port", or a URL such as
	// "https://host:port"). An empty address means no owner is known and
	// the check takes the Fallback. Required; it is called once per check
	// (with the first hit's key) and must be fast and safe for concurrent
	// use, such as a lookup in a ring snapshot. It must not keep key (RL.CHECK
	// passes a key that aliases the connection's read buffer).
	Owner func(key string) (self bool, httpAddr string)
	// HTTPClient sends forwarded checks. Default: a client of the Router's
	// own, keeping up to 64 idle connections per owner.
	HTTPClient *http.Client
	// Timeout bounds one forwarded check. Default 500ms
	// (DefaultForwardTimeout).
	Timeout time.Duration
	// Fallback is what happens when the owner cannot be reached (a
	// connection error, a timeout, a 5xx or malformed answer). Default
	// FallbackLocal.
	Fallback Fallback
	// DownFor is how long an owner that failed is not tried again: its
	// keys take the Fallback at once instead of waiting for another
	// timeout. Default 1s (DefaultDownFor); negative: always try.
	DownFor time.Duration
	// Clock is the time for DownFor. Default time.Now.
	Clock func() time.Time
	// Global decides the checks of global-approx limits on this node
	// (global.go). Nil: they are decided like the others, on the owner
	// and exactly.
	Global *Global
}

// RouterStats counts a Router's decisions.
type RouterStats struct {
	Local       uint64 // decided here, the owner: exact
	Forwarded   uint64 // decided by the owner: exact
	Fallback    uint64 // decided here, the owner unreachable: approximate
	Unavailable uint64 // failed with ErrOwnerUnavailable (FallbackError)
	Global      uint64 // global-approx: decided here from this node's share
}

// Router decides each check on the node that owns its key, so that
// decisions are exact while one node owns a key: it checks with its local
// Limiter when this node owns the key, and otherwise sends the check to
// the owner's POST /ratelimit/check with the ForwardedHeader. A
// multi-limit check is decided as a whole on the owner of its first hit's
// key; it stays exact when all its keys have that owner (see
// docs/ratelimit.md for the others).
//
// Policies are resolved by the node that receives the request (with
// Local()), and the owner gets the resolved limits, so every node should
// have the same policies (the cluster replicates a PolicyLog).
//
// A Router is safe for concurrent use. Close releases its idle
// connections; it does not close the Limiter.
type Router struct {
	local    *Limiter
	owner    func(string) (bool, string)
	hc       *http.Client
	owned    *http.Transport // nil with RouterConfig.HTTPClient
	timeout  time.Duration
	fallback Fallback
	downFor  time.Duration
	clock    func() time.Time
	global   *Global

	mu   sync.Mutex           // guards down
	down map[string]time.Time // owner address -> not tried before

	nLocal, nForwarded, nFallback, nUnavailable, nGlobal atomic.Uint64
}

// NewRouter returns a Router deciding with l what this node owns.
func NewRouter(l *Limiter, cfg RouterConfig) (*Router, error) {
	if l == nil {
		return nil, errorf(ErrInvalidRequest, "NewRouter: nil Limiter")
	}
	if cfg.Owner == nil {
		return nil, errorf(ErrInvalidRequest, "NewRouter: RouterConfig.Owner is required")
	}
	if cfg.Fallback > FallbackError {
		return nil, errorf(ErrInvalidRequest, "NewRouter: unknown Fallback %d", cfg.Fallback)
	}
	r := &Router{local: l, owner: cfg.Owner, hc: cfg.HTTPClient, timeout: cfg.Timeout, fallback: cfg.Fallback,
		downFor: cfg.DownFor, clock: cfg.Clock, global: cfg.Global, down: map[string]time.Time{}}
	if r.timeout <= 0 {
		r.timeout = DefaultForwardTimeout
	}
	if r.downFor == 0 {
		r.downFor = DefaultDownFor
	}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		r.owned = t
		r.hc = &http.Client{Transport: t}
	}
	return r, nil
}

// Close closes the idle connections of the Router's own HTTP client. The
// Router stays usable. It is idempotent.
func (r *Router) Close() error {
	if r.owned != nil {
		r.owned.CloseIdleConnections()
	}
	return nil
}

// Local returns the Limiter of this node.
func (r *Router) Local() *Limiter { return r.local }

// Stats returns the decision counts so far.
func (r *Router) Stats() RouterStats {
	return RouterStats{Local: r.nLocal.Load(), Forwarded: r.nForwarded.Load(),
		Fallback: r.nFallback.Load(), Unavailable: r.nUnavailable.Load(), Global: r.nGlobal.Load()}
}

// CheckMultiContext checks hits atomically on the owner of hits[0].Key
// (see Limiter.CheckMulti for the semantics). Invalid hits fail here with
// the Limiter's errors. Statuses decided by another node have millisecond
// resolution, rounded up.
func (r *Router) CheckMultiContext(ctx context.Context, hits []Hit, out []Status) (Status, error) {
	if len(hits) == 0 || len(hits) > MaxHits || (out != nil && len(out) < len(hits)) {
		return r.local.CheckMulti(hits, out) // for its error
	}
	if g := globalHits(hits); g > 0 {
		if g < len(hits) {
			return Status{}, errorf(ErrInvalidRequest, "a check cannot mix global-approx limits with owner-scoped ones in cluster mode (check them separately)")
		}
		if r.global != nil {
			r.nGlobal.Add(1)
			return r.global.CheckMultiContext(ctx, hits, out)
		}
		// No Global: decided on the owner, with the state the forwarded
		// form (which carries no scope) names. Validated first, as the
		// scope's rules (fixed_window only) go with the rewrite.
		for i := range hits {
			if _, err := validateHit(hits[i].Key, &hits[i].Limit, hits[i].Cost); err != nil {
				return Status{}, err
			}
		}
		hits = append([]Hit(nil), hits...)
		for i := range hits {
			hits[i].Limit.Scope = ScopeOwner
		}
	}
	self, addr := r.owner(hits[0].Key)
	if self {
		r.nLocal.Add(1)
		return r.local.CheckMulti(hits, out)
	}
	if err := validateForward(hits); err != nil {
		return Status{}, err
	}
	var cause error = errNoOwner
	if addr != "" {
		if cause = r.skip(addr); cause == nil {
			s, err := r.forward(ctx, addr, hits, out)
			var oe *ownerError
			if !errors.As(err, &oe) {
				if err == nil {
					r.nForwarded.Add(1)
				}
				return s, err
			}
			if ctx.Err() != nil { // the caller gave up, the owner did not fail
				return Status{}, fmt.Errorf("ratelimit: forward to %s: %w", addr, ctx.Err())
			}
			r.markDown(addr)
			cause = err
		}
	}
	if r.fallback == FallbackError {
		r.nUnavailable.Add(1)
		return Status{}, fmt.Errorf("%w: %w", ErrOwnerUnavailable, cause)
	}
	r.nFallback.Add(1)
	return r.local.CheckMulti(hits, out)
}

// CheckArgs runs RL.CHECK (see Limiter.CheckArgs) on the owner of the key,
// within the Router's Timeout.
func (r *Router) CheckArgs(args [][]byte) ([4]int64, error) { return CheckArgsWith(r, args) }

// CheckArgsContext is CheckArgs with the caller's context, whose
// credentials a forwarded check carries to the owner.
func (r *Router) CheckArgsContext(ctx context.Context, args [][]byte) ([4]int64, error) {
	return CheckArgsWithContext(ctx, r, args)
}

// globalHits counts the hits of scope global-approx.
func globalHits(hits []Hit) int {
	n := 0
	for i := range hits {
		if hits[i].Limit.Scope == ScopeGlobalApprox {
			n++
		}
	}
	return n
}

// errNoOwner is the cause of a fallback when Owner gave no address.
var errNoOwner = errors.New("no owner known for the key")

// ownerError is a failure of the owner: no answer, a 5xx, or a malformed
// answer. The check takes the Fallback.
type ownerError struct {
	addr string
	err  error
}

func (e *ownerError) Error() string { return "owner " + e.addr + ": " + e.err.Error() }
func (e *ownerError) Unwrap() error { return e.err }

// skip returns an error while addr is marked down.
func (r *Router) skip(addr string) error {
	if r.downFor < 0 {
		return nil
	}
	r.mu.Lock()
	until, ok := r.down[addr]
	r.mu.Unlock()
	if ok && r.clock().Before(until) {
		return &ownerError{addr, errors.New("failed recently, not tried until " + until.Format(time.RFC3339Nano))}
	}
	return nil
}

func (r *Router) markDown(addr string) {
	if r.downFor < 0 {
		return
	}
	r.mu.Lock()
	r.down[addr] = r.clock().Add(r.downFor)
	r.mu.Unlock()
}

// validateForward checks hits as Limiter.CheckMulti would, plus what the
// wire needs: names the HTTP API accepts.
func validateForward(hits []Hit) error {
	for i := range hits {
		h := &hits[i]
		if _, err := validateHit(h.Key, &h.Limit, h.Cost); err != nil {
			return err
		}
		if h.Limit.Name != "" {
			if err := validatePolicyName(h.Limit.Name); err != nil {
				return errorf(ErrInvalidLimit, "limit name %q cannot be sent to the key's owner: %v", truncate(h.Limit.Name, 64), err)
			}
		}
	}
	return nil
}

// forwardRequest is the body of a forwarded check: every hit as an ad-hoc
// limit with its own key and cost, so the owner decides exactly hits.
func forwardRequest(hits []Hit) checkRequest {
	req := checkRequest{Key: hits[0].Key, Limits: make([]limitJSON, len(hits))}
	for i, h := range hits {
		l := limitJSON{Name: h.Limit.Name, Algorithm: h.Limit.Algorithm.String(),
			Limit: jsonInt{h.Limit.Limit, true}, Period: FormatPeriod(h.Limit.Period),
			Burst: jsonInt{h.Limit.Burst, h.Limit.Burst != 0}, Cost: jsonInt{h.Cost, true}}
		if h.Key != req.Key {
			l.Key = h.Key
		}
		req.Limits[i] = l
	}
	return req
}

// checkURL is the check endpoint of the node at addr.
func checkURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/") + "/ratelimit/check"
}

// maxAnswerBytes bounds a forwarded check's answer (64 limits take ~16 KiB).
const maxAnswerBytes = 1 << 20

// forward sends hits to the owner at addr. An *ownerError means the owner
// did not decide.
func (r *Router) forward(ctx context.Context, addr string, hits []Hit, out []Status) (Status, error) {
	body, err := json.Marshal(forwardRequest(hits))
	if err != nil {
		return Status{}, fmt.Errorf("ratelimit: encode forwarded check: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, checkURL(addr), bytes.NewReader(body))
	if err != nil {
		return Status{}, &ownerError{addr, err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ForwardedHeader, "1")
	// The owner authorizes the check as the user who asked this node.
	if tok := auth.TokenFromContext(ctx); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	// Within a trace, the owner's HTTP span is a child of this request's.
	tracing.InjectHTTP(req.Header, tracing.FromContext(ctx))
	// Waiting for the owner is I/O: the request's admission slot goes to
	// the next request meanwhile (shed.IOWait).
	defer shed.IOWait(ctx).Resume()
	resp, err := r.hc.Do(req)
	if err != nil {
		return Status{}, &ownerError{addr, err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Status{}, &ownerError{addr, err}
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests:
		s, err := decodeAnswer(raw, out, len(hits))
		if err != nil {
			return Status{}, &ownerError{addr, err}
		}
		return s, nil
	case http.StatusBadRequest:
		// The owner rejected what this node accepted (a limit listed
		// twice whose total cost is above its capacity).
		return Status{}, errorf(ErrInvalidRequest, "the key's owner %s rejected the check: %s", addr, truncate(strings.TrimSpace(string(raw)), 200))
	}
	return Status{}, &ownerError{addr, fmt.Errorf("answered %s: %s", resp.Status, truncate(strings.TrimSpace(string(raw)), 200))}
}

// decodeAnswer decodes the answer of POST /ratelimit/check to a check of n
// limits: the binding status, and each limit's into out (when not nil).
func decodeAnswer(raw []byte, out []Status, n int) (Status, error) {
	var a checkAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return Status{}, fmt.Errorf("decode answer: %w", err)
	}
	if len(a.Limits) != n {
		return Status{}, fmt.Errorf("answer has %d limits, want %d", len(a.Limits), n)
	}
	if a.Limit < 0 || a.Remaining < 0 || a.ResetMS < 0 || a.RetryAfterMS < 0 || a.DelayMS < 0 {
		return Status{}, errors.New("answer has a negative figure")
	}
	for i, l := range a.Limits {
		if l.Limit < 0 || l.Remaining < 0 || l.ResetMS < 0 || l.RetryAfterMS < 0 || l.DelayMS < 0 {
			return Status{}, fmt.Errorf("answer has a negative figure in limits[%d]", i)
		}
		if out != nil {
			out[i] = msStatus(l.Allowed, l.Limit, l.Remaining, l.ResetMS, l.RetryAfterMS, l.DelayMS)
		}
	}
	return msStatus(a.Allowed, a.Limit, a.Remaining, a.ResetMS, a.RetryAfterMS, a.DelayMS), nil
}

// msStatus builds a Status from an answer's figures. Durations are capped
// (at twice MaxPeriod) so that no answer can overflow them.
func msStatus(allowed bool, limit, remaining, resetMS, retryMS, delayMS int64) Status {
	ms := func(v int64) time.Duration {
		return time.Duration(min(v, int64(MaxPeriod/time.Millisecond)*2)) * time.Millisecond
	}
	return Status{Allowed: allowed, Limit: limit, Remaining: remaining, Reset: ms(resetMS), RetryAfter: ms(retryMS), Delay: ms(delayMS)}
}
