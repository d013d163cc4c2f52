package ratelimit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// PolicyRecord is one policy name's state in a PolicyLog: the policy, or
// its deletion (Policy nil), stamped for last-writer-wins. Records travel
// between cluster nodes and are what a PolicyPersister stores.
type PolicyRecord struct {
	Name   string  `json:"name"`
	Policy *Policy `json:"policy,omitempty"`
	// Order places the policy in the matching order (then Name).
	Order int64 `json:"order"`
	// Stamp is a hybrid logical clock in unix ns; the higher (Stamp, Node)
	// wins.
	Stamp int64  `json:"stamp"`
	Node  string `json:"node"`
}

func (r *PolicyRecord) newer(o *PolicyRecord) bool {
	return r.Stamp > o.Stamp || r.Stamp == o.Stamp && r.Node > o.Node
}

func (r *PolicyRecord) validate() error {
	if err := validatePolicyName(r.Name); err != nil {
		return err
	}
	if r.Policy == nil {
		return nil
	}
	if r.Policy.Name != r.Name {
		return errorf(ErrInvalidPolicy, "record %q holds policy %q", r.Name, r.Policy.Name)
	}
	return r.Policy.Validate()
}

// PolicyPersister stores a PolicyLog's records durably: the node's Pebble
// through the engine in counterd. Implementations are safe for concurrent
// use.
type PolicyPersister interface {
	// LoadPolicyRecords returns every stored record, encoded.
	LoadPolicyRecords() ([][]byte, error)
	// StorePolicyRecords writes the encoded records by name durably and
	// atomically (all or none).
	StorePolicyRecords(map[string][]byte) error
}

// PolicyLog is a PolicyStore of one node that converges with the other
// nodes' logs: every policy name has one PolicyRecord, merged
// last-writer-wins (Merge is idempotent, commutative and associative), and
// deletions stay as tombstones so that a merge cannot resurrect a policy.
// Every change is stored through the PolicyPersister before it is visible,
// so the policies survive a restart. In cluster mode the node pushes the
// records of each local write to its peers (SetPublish) and exchanges
// whole logs periodically; in embedded mode it is the persistent store of
// the one node.
//
// A PolicyLog is safe for concurrent use; it has no goroutines and
// nothing to close.
type PolicyLog struct {
	node    string
	persist PolicyPersister // nil: memory only
	now     func() time.Time

	mu    sync.Mutex // guards recs, clock; held across persist, so disk and memory agree
	recs  map[string]PolicyRecord
	clock int64 // the highest stamp issued or seen

	publish atomic.Pointer[func([]PolicyRecord)]
}

var _ PolicyStore = (*PolicyLog)(nil)

// OpenPolicyLog returns the log of node (its name breaks stamp ties) with
// the records p holds (p may be nil: memory only). A stored record that
// does not decode or validate fails with ErrInvalidPolicy.
func OpenPolicyLog(node string, p PolicyPersister) (*PolicyLog, error) {
	l := &PolicyLog{node: node, persist: p, now: time.Now, recs: map[string]PolicyRecord{}}
	if p == nil {
		return l, nil
	}
	raw, err := p.LoadPolicyRecords()
	if err != nil {
		return nil, fmt.Errorf("ratelimit: load policy records: %w", err)
	}
	for _, b := range raw {
		var r PolicyRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, errorf(ErrInvalidPolicy, "stored record %.64q: %v", b, err)
		}
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("stored record %q: %w", r.Name, err)
		}
		l.recs[r.Name] = r
		l.clock = max(l.clock, r.Stamp)
	}
	return l, nil
}

// SetPublish sets f to receive the records of every local write, after
// they are stored (the cluster node pushes them to its peers). f runs in
// the writer's goroutine, outside the log's lock.
func (l *PolicyLog) SetPublish(f func([]PolicyRecord)) { l.publish.Store(&f) }

// LoadPolicies returns the live policies in matching order.
func (l *PolicyLog) LoadPolicies(ctx context.Context) ([]Policy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	live := make([]PolicyRecord, 0, len(l.recs))
	for _, r := range l.recs {
		if r.Policy != nil {
			live = append(live, r)
		}
	}
	l.mu.Unlock()
	sort.Slice(live, func(i, j int) bool {
		return cmp.Or(cmp.Compare(live[i].Order, live[j].Order), cmp.Compare(live[i].Name, live[j].Name)) < 0
	})
	ps := make([]Policy, len(live))
	for i, r := range live {
		ps[i] = *r.Policy
	}
	return ps, nil
}

// Records returns a copy of every record, tombstones included.
func (l *PolicyLog) Records() []PolicyRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]PolicyRecord, 0, len(l.recs))
	for _, r := range l.recs {
		out = append(out, r)
	}
	return out
}

// PutPolicy adds p at the end of the order or replaces it in place.
func (l *PolicyLog) PutPolicy(ctx context.Context, p Policy) error {
	if err := ValidatePolicies([]Policy{p}); err != nil {
		return err
	}
	return l.write(ctx, func(stamp, next int64) []PolicyRecord {
		order := next
		if old, ok := l.recs[p.Name]; ok && old.Policy != nil {
			order = old.Order
		}
		return []PolicyRecord{{Name: p.Name, Policy: &p, Order: order, Stamp: stamp, Node: l.node}}
	})
}

// DeletePolicy removes the named policy (leaving a tombstone).
func (l *PolicyLog) DeletePolicy(ctx context.Context, name string) (bool, error) {
	found := false
	err := l.write(ctx, func(stamp, _ int64) []PolicyRecord {
		old, ok := l.recs[name]
		if !ok || old.Policy == nil {
			return nil
		}
		found = true
		return []PolicyRecord{{Name: name, Order: old.Order, Stamp: stamp, Node: l.node}}
	})
	return found, err
}

// ReplacePolicies makes ps, in this order, the only live policies.
func (l *PolicyLog) ReplacePolicies(ctx context.Context, ps []Policy) error {
	if err := ValidatePolicies(ps); err != nil {
		return err
	}
	return l.write(ctx, func(stamp, next int64) []PolicyRecord {
		out := make([]PolicyRecord, 0, len(ps))
		keep := make(map[string]bool, len(ps))
		for i := range ps {
			p := ps[i]
			keep[p.Name] = true
			out = append(out, PolicyRecord{Name: p.Name, Policy: &p, Order: next + int64(i), Stamp: stamp, Node: l.node})
		}
		for name, r := range l.recs {
			if r.Policy != nil && !keep[name] {
				out = append(out, PolicyRecord{Name: name, Order: r.Order, Stamp: stamp, Node: l.node})
			}
		}
		return out
	})
}

// Seed adds the policies of ps whose name the log has never held (a
// policies file read at start) with stamp 0, older than any write: a
// change made through the API, here or on any other node, wins over the
// file, also on a node that joins with an empty disk. It returns the
// names it added, and those it kept although ps differs (as SeedPolicies).
func (l *PolicyLog) Seed(ps []Policy) (added, kept []string, err error) {
	if err := ValidatePolicies(ps); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var recs []PolicyRecord
	for i := range ps {
		old, ok := l.recs[ps[i].Name]
		switch {
		case !ok:
			recs = append(recs, PolicyRecord{Name: ps[i].Name, Policy: &ps[i], Order: int64(i + 1), Node: l.node})
			added = append(added, ps[i].Name)
		case old.Policy == nil || normalCost(*old.Policy) != normalCost(ps[i]):
			kept = append(kept, ps[i].Name)
		}
	}
	return added, kept, l.applyLocked(recs)
}

// write stores and applies the records change makes (given a new stamp
// and the order after every record's), then publishes them.
func (l *PolicyLog) write(ctx context.Context, change func(stamp, next int64) []PolicyRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	l.clock = max(l.clock+1, l.now().UnixNano())
	var next int64
	for _, r := range l.recs {
		next = max(next, r.Order)
	}
	recs := change(l.clock, next+1)
	err := l.applyLocked(recs)
	l.mu.Unlock()
	if err != nil || len(recs) == 0 {
		return err
	}
	if f := l.publish.Load(); f != nil {
		(*f)(recs)
	}
	return nil
}

// applyLocked stores recs, then makes them visible. Caller holds l.mu.
func (l *PolicyLog) applyLocked(recs []PolicyRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if l.persist != nil {
		kv := make(map[string][]byte, len(recs))
		for i := range recs {
			b, err := json.Marshal(&recs[i])
			if err != nil {
				return fmt.Errorf("ratelimit: encode policy record %q: %w", recs[i].Name, err)
			}
			kv[recs[i].Name] = b
		}
		if err := l.persist.StorePolicyRecords(kv); err != nil {
			return fmt.Errorf("ratelimit: store policy records: %w", err)
		}
	}
	for _, r := range recs {
		l.recs[r.Name] = r
		l.clock = max(l.clock, r.Stamp)
	}
	return nil
}

// Merge joins records from another node's log: per name, the newer
// record wins. It returns how many records changed here. If a record is
// invalid the error wraps ErrInvalidPolicy and nothing changes.
func (l *PolicyLog) Merge(recs []PolicyRecord) (int, error) {
	for i := range recs {
		if err := recs[i].validate(); err != nil {
			return 0, fmt.Errorf("policy record %d: %w", i, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	win := map[string]PolicyRecord{}
	for _, r := range recs {
		cur, ok := win[r.Name]
		if !ok {
			cur, ok = l.recs[r.Name]
		}
		if !ok || r.newer(&cur) {
			win[r.Name] = r
		}
	}
	out := make([]PolicyRecord, 0, len(win))
	for _, r := range win {
		out = append(out, r)
	}
	return len(out), l.applyLocked(out)
}
