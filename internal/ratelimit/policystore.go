package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// PolicyStore keeps the rate-limit policies where every node sees them:
// PostgreSQL in tiered mode, the replicated state in cluster mode. The
// nodes' Limiters follow it through a PolicySync.
//
// The policies form one ordered list (the matching order, see Policy).
// Implementations are safe for concurrent use; each method is atomic: a
// concurrent LoadPolicies sees a change entirely or not at all. Invalid
// policies fail with an error wrapping ErrInvalidPolicy and change
// nothing; infrastructure failures are returned as they are (wrapped with
// %w).
type PolicyStore interface {
	// LoadPolicies returns every policy, in matching order.
	LoadPolicies(ctx context.Context) ([]Policy, error)
	// PutPolicy adds p at the end of the order, or replaces the policy of
	// the same name in its place.
	PutPolicy(ctx context.Context, p Policy) error
	// DeletePolicy removes the named policy and reports whether it
	// existed.
	DeletePolicy(ctx context.Context, name string) (bool, error)
	// ReplacePolicies replaces all policies with ps, in that order. ps
	// must be valid as a whole (no name twice).
	ReplacePolicies(ctx context.Context, ps []Policy) error
}

// ValidatePolicies reports whether ps is a valid policy list: every
// policy valid, no name twice. Stores call it before writing.
func ValidatePolicies(ps []Policy) error {
	_, err := compilePolicies(ps)
	return err
}

// DefaultPolicySyncInterval is how often a PolicySync reloads the store by
// default: a change made through one node reaches every other node within
// about this long.
const DefaultPolicySyncInterval = time.Second

// PolicySyncConfig configures NewPolicySync. The zero value is valid.
type PolicySyncConfig struct {
	// Interval is how often the store is reloaded into the Limiter.
	// Default 1s (DefaultPolicySyncInterval); negative: never (Reload on
	// demand).
	Interval time.Duration
	// Timeout bounds one reload. Default 5s.
	Timeout time.Duration
	// Logger receives failed reloads (the Limiter keeps its last
	// policies). Default: discard.
	Logger *slog.Logger
}

// PolicySync keeps a Limiter's policies equal to a PolicyStore's. Its
// write methods (it is a PolicyStore itself, for ratelimitapi.HTTPOptions.Policies)
// write through the store and then apply the same change to the Limiter,
// so the node that made a change sees it at once; a goroutine reloads the
// store every Interval so that every other node sees it within about
// Interval. A reload and a write never interleave, so a reload cannot
// undo a write of this node.
//
// PolicySync is safe for concurrent use. Whoever calls NewPolicySync must
// call Close, which stops the reload goroutine; Close is idempotent and
// does not close the store or the Limiter.
type PolicySync struct {
	l   *Limiter
	st  PolicyStore
	cfg PolicySyncConfig

	mu sync.Mutex // serialises writes and reloads, so a reload never undoes a write

	lastErr   atomic.Pointer[error] // the last reload's error; nil after a good one
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ PolicyStore = (*PolicySync)(nil)

// NewPolicySync loads st into l (failing if it cannot) and starts the
// reload goroutine.
func NewPolicySync(ctx context.Context, l *Limiter, st PolicyStore, cfg PolicySyncConfig) (*PolicySync, error) {
	if l == nil || st == nil {
		return nil, errorf(ErrInvalidRequest, "NewPolicySync: nil Limiter or PolicyStore")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultPolicySyncInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &PolicySync{l: l, st: st, cfg: cfg, stop: make(chan struct{})}
	if err := s.Reload(ctx); err != nil {
		return nil, err
	}
	if cfg.Interval > 0 {
		s.wg.Add(1)
		go s.run()
	}
	return s, nil
}

func (s *PolicySync) run() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		if err := s.Reload(ctx); err != nil {
			s.cfg.Logger.Warn("ratelimit: reloading policies failed; keeping the last ones", "err", err)
		}
		cancel()
	}
}

// Close stops the reload goroutine. It is idempotent.
func (s *PolicySync) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
	})
	return nil
}

// Err is the error of the last reload, nil if it succeeded.
func (s *PolicySync) Err() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload loads the store into the Limiter now.
func (s *PolicySync) Reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.reloadLocked(ctx)
	if err != nil {
		s.lastErr.Store(&err)
	} else {
		s.lastErr.Store(nil)
	}
	return err
}

func (s *PolicySync) reloadLocked(ctx context.Context) error {
	ps, err := s.st.LoadPolicies(ctx)
	if err != nil {
		return fmt.Errorf("ratelimit: load policies: %w", err)
	}
	for i := range ps {
		ps[i] = normalCost(ps[i])
	}
	if slices.Equal(ps, s.l.Policies()) {
		return nil // the usual case: keep the compiled set
	}
	return s.l.SetPolicies(ps)
}

// LoadPolicies returns the Limiter's policies (the store's as of the last
// reload or write).
func (s *PolicySync) LoadPolicies(context.Context) ([]Policy, error) { return s.l.Policies(), nil }

// PutPolicy writes p to the store, then to the Limiter.
func (s *PolicySync) PutPolicy(ctx context.Context, p Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.st.PutPolicy(ctx, p); err != nil {
		return err
	}
	return s.l.SetPolicy(p)
}

// DeletePolicy deletes the policy from the store, then from the Limiter.
func (s *PolicySync) DeletePolicy(ctx context.Context, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, err := s.st.DeletePolicy(ctx, name)
	if err != nil {
		return false, err
	}
	s.l.DeletePolicy(name)
	return ok, nil
}

// ReplacePolicies replaces the store's policies, then the Limiter's.
func (s *PolicySync) ReplacePolicies(ctx context.Context, ps []Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.st.ReplacePolicies(ctx, ps); err != nil {
		return err
	}
	return s.l.SetPolicies(ps)
}

// SeedPolicies adds to st the policies of ps whose name it does not hold
// yet (a policies file read at start): the store wins on conflict, so a
// change made through the API survives a restart with the original file.
// It returns the names it added and the names it kept although ps
// differs. Two nodes seeding at once with different files may interleave
// (each name ends with one of the versions).
func SeedPolicies(ctx context.Context, st PolicyStore, ps []Policy) (added, kept []string, err error) {
	if err := ValidatePolicies(ps); err != nil {
		return nil, nil, err
	}
	have, err := st.LoadPolicies(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("ratelimit: seed policies: %w", err)
	}
	byName := make(map[string]Policy, len(have))
	for _, p := range have {
		byName[p.Name] = p
	}
	for _, p := range ps {
		old, ok := byName[p.Name]
		if ok {
			if normalCost(old) != normalCost(p) {
				kept = append(kept, p.Name)
			}
			continue
		}
		if err := st.PutPolicy(ctx, p); err != nil {
			return added, kept, fmt.Errorf("ratelimit: seed policy %q: %w", p.Name, err)
		}
		added = append(added, p.Name)
	}
	return added, kept, nil
}

// normalCost is p with the default cost made explicit (0 means 1).
func normalCost(p Policy) Policy {
	if p.Cost == 0 {
		p.Cost = 1
	}
	return p
}

// MemoryPolicyStore is a PolicyStore in memory: for tests, and for one
// process that wants the PolicyStore API without persistence. The zero
// value is an empty store. It is safe for concurrent use.
type MemoryPolicyStore struct {
	mu sync.Mutex // guards ps
	ps []Policy
}

var _ PolicyStore = (*MemoryPolicyStore)(nil)

// LoadPolicies returns a copy of the policies.
func (m *MemoryPolicyStore) LoadPolicies(ctx context.Context) ([]Policy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ps), nil
}

// PutPolicy adds or replaces p.
func (m *MemoryPolicyStore) PutPolicy(ctx context.Context, p Policy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidatePolicies([]Policy{p}); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.IndexFunc(m.ps, func(q Policy) bool { return q.Name == p.Name }); i >= 0 {
		m.ps[i] = p
	} else {
		m.ps = append(m.ps, p)
	}
	return nil
}

// DeletePolicy removes the named policy.
func (m *MemoryPolicyStore) DeletePolicy(ctx context.Context, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.ps, func(q Policy) bool { return q.Name == name })
	if i < 0 {
		return false, nil
	}
	m.ps = slices.Delete(m.ps, i, i+1)
	return true, nil
}

// ReplacePolicies replaces all policies.
func (m *MemoryPolicyStore) ReplacePolicies(ctx context.Context, ps []Policy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidatePolicies(ps); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ps = slices.Clone(ps)
	return nil
}
