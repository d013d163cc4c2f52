package quota

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/counterd/counterd/internal/glob"
)

// ErrExceeded is what every refused write wraps (errors.Is); the error is
// an *ExceededError with the quota's name and limit.
var ErrExceeded = errors.New("quota exceeded")

// ExceededError is a write refused by a quota.
type ExceededError struct {
	Quota     string // the quota's pattern, or DefaultName
	Namespace string // for the default: the namespace counted
	Limit     string // "max_keys" or "max_hash_fields"
	Max       int64
	ID        string // the id written
}

// DefaultName names the default quota in errors, usage and metrics.
const DefaultName = "default"

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded for %s (%s %d)", e.Name(), e.Limit, e.Max)
}

// Name is the quota's name as errors show it: its pattern, or "default
// namespace NS" for the default.
func (e *ExceededError) Name() string {
	if e.Quota == DefaultName {
		return fmt.Sprintf("%s namespace %q", DefaultName, e.Namespace)
	}
	return e.Quota
}

func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Namespace is the namespace an id counts in under the default quota: the
// part before its first ':', or "" for an id without one.
func Namespace(id string) string {
	if i := strings.IndexByte(id, ':'); i >= 0 {
		return id[:i]
	}
	return ""
}

// Counter counts the keys under one quota. It is safe for concurrent use.
type Counter struct {
	name, ns string
	limits   Limits
	keys     atomic.Int64
}

// Name is the counter's quota: its pattern, or DefaultName.
func (c *Counter) Name() string { return c.name }

// Namespace is the namespace the default counts in ("" for a pattern).
func (c *Counter) Namespace() string { return c.ns }

// Exceeded is the refusal of id by the counter's limit (limit is
// "max_keys" or "max_hash_fields"), for a backend that counts elsewhere.
func (c *Counter) Exceeded(id, limit string, max int64) error { return c.exceeded(id, limit, max) }

// Limits are the counter's quota's.
func (c *Counter) Limits() Limits { return c.limits }

// Keys is the number of keys counted.
func (c *Counter) Keys() int64 { return c.keys.Load() }

// Reserve counts one more key for id, or refuses it with an
// *ExceededError (nothing counted) if the quota's max_keys are reached.
func (c *Counter) Reserve(id string) error {
	if c.limits.MaxKeys == 0 {
		c.keys.Add(1)
		return nil
	}
	for {
		n := c.keys.Load()
		if n >= c.limits.MaxKeys {
			return c.exceeded(id, "max_keys", c.limits.MaxKeys)
		}
		if c.keys.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// Add counts n more keys (negative: fewer) without a check: a key given
// back, or one that exists already (loaded, replicated).
func (c *Counter) Add(n int64) { c.keys.Add(n) }

// CheckFields refuses a hash that would have fields fields.
func (c *Counter) CheckFields(id string, fields int) error {
	if m := c.limits.MaxHashFields; m != 0 && int64(fields) > m {
		return c.exceeded(id, "max_hash_fields", m)
	}
	return nil
}

func (c *Counter) exceeded(id, limit string, max int64) error {
	return &ExceededError{Quota: c.name, Namespace: c.ns, Limit: limit, Max: max, ID: id}
}

// Set is a Config with a key counter per quota, and per namespace for
// the default. It is safe for concurrent use.
type Set struct {
	cfg   *Config
	rules []*Counter
	defs  sync.Map // namespace -> *Counter, for the default
}

// NewSet returns a Set of c with every counter at 0.
func NewSet(c *Config) *Set {
	s := &Set{cfg: c}
	for _, r := range c.Rules {
		s.rules = append(s.rules, &Counter{name: r.Pattern, limits: r.Limits})
	}
	return s
}

// Config is the set's.
func (s *Set) Config() *Config { return s.cfg }

// Of returns the counter id counts under, nil when no quota applies (no
// pattern matches and there is no default).
func (s *Set) Of(id string) *Counter {
	for _, c := range s.rules {
		if glob.Match(c.name, id) {
			return c
		}
	}
	if s.cfg.Default == nil {
		return nil
	}
	ns := Namespace(id)
	if c, ok := s.defs.Load(ns); ok {
		return c.(*Counter)
	}
	c, _ := s.defs.LoadOrStore(ns, &Counter{name: DefaultName, ns: ns, limits: *s.cfg.Default})
	return c.(*Counter)
}

// Usage is one quota's count and limits.
type Usage struct {
	Quota     string `json:"quota"`               // pattern, or "default"
	Namespace string `json:"namespace,omitempty"` // for the default
	Keys      int64  `json:"keys"`
	Limits
}

// Usage lists the quotas in file order, then the default's namespaces
// (sorted) that hold keys.
func (s *Set) Usage() []Usage {
	var out []Usage
	for _, c := range s.rules {
		out = append(out, Usage{Quota: c.name, Keys: c.Keys(), Limits: c.limits})
	}
	var defs []Usage
	s.defs.Range(func(_, v any) bool {
		c := v.(*Counter)
		if n := c.Keys(); n != 0 {
			defs = append(defs, Usage{Quota: DefaultName, Namespace: c.ns, Keys: n, Limits: c.limits})
		}
		return true
	})
	sort.Slice(defs, func(i, j int) bool { return defs[i].Namespace < defs[j].Namespace })
	return append(out, defs...)
}

// Message is what a refused write says, from the "quota exceeded"
// onwards: "quota exceeded for q:* (max_keys 10)". err wraps ErrExceeded
// (an *ExceededError, or its text carried from another node).
func Message(err error) string {
	var qe *ExceededError
	if errors.As(err, &qe) {
		return qe.Error()
	}
	msg := err.Error()
	if i := strings.Index(msg, ErrExceeded.Error()); i >= 0 {
		return msg[i:]
	}
	return ErrExceeded.Error()
}
