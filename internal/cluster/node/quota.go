package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
)

// Quotas in a cluster (docs/security.md, "Quotas").
//
// max_hash_fields is per key: the hash's owner's engine checks it.
//
// max_keys counts keys of the whole cluster: each quota (and each
// namespace of the default) has a count kept in an ordinary counter with
// a reserved id (QuotaIDPrefix), which lives, replicates and moves with
// the ring like any other, so it survives restarts and handoffs. A key's
// owner reserves one unit of that count (a compare-and-set, refused at
// max_keys) before a write creates the key, and gives it back when the
// write did not create it, when a write deletes it, and (through the
// engine's expire hook) when its TTL ends. Adds to existing keys without
// a TTL read the local store only: no quota RPC.
//
// On the owner, writes of ids under a max_keys quota go through the
// quota stripes: shared for writes that can neither create nor remove
// their ids (every id exists, has no TTL, and the op sets none), which
// therefore cannot change the count; exclusive otherwise, so the
// existence before and after the write, and so the change of the count,
// is this write's alone. An expiry during an exclusive write is seen by
// a watcher and left to the hook.
//
// SetQuotas recounts every count from a scan of the cluster's keys.

// QuotaIDPrefix starts the ids of the cluster's quota counts. They are
// never counted under a quota themselves.
const QuotaIDPrefix = "_quota:"

// nodeQuotas is the node's quota configuration.
type nodeQuotas struct {
	set  *quota.Set // classifies ids; its counts are not used
	keys bool       // some quota has max_keys
}

// quotaStore is a Store that checks the per-key limits and reports
// expiries (EngineStore).
type quotaStore interface {
	SetQuotas(c *quota.Config)
	SetExpireHook(fn func(id string))
}

// qstate is the node's quota machinery (fields of Node).
type qstate struct {
	cfg     atomic.Pointer[nodeQuotas]
	reload  sync.Mutex
	stripes [256]sync.RWMutex
	watch   sync.Map // id -> *atomic.Bool: an exclusive write watching for its expiry
	hooked  sync.Once

	mu      sync.Mutex
	pending []string // expired ids whose room is to be given back
	wake    chan struct{}
}

// quotaCounter returns the max_keys counter id counts under, nil when
// none applies.
func (q *nodeQuotas) counter(id string) *quota.Counter {
	if q == nil || !q.keys || strings.HasPrefix(id, QuotaIDPrefix) {
		return nil
	}
	c := q.set.Of(id)
	if c == nil || c.Limits().MaxKeys == 0 {
		return nil
	}
	return c
}

// quotaCountID is the id of the counter that holds c's count.
func quotaCountID(c *quota.Counter) string { return countID(c.Name(), c.Namespace()) }

// countID is the id of the count of quota name (namespace ns for the
// default).
func countID(name, ns string) string {
	id := QuotaIDPrefix + "r:" + name
	if name == quota.DefaultName {
		id = QuotaIDPrefix + "d:" + ns
	}
	if contract.ValidateID(id) != nil {
		sum := sha256.Sum256([]byte(id))
		id = QuotaIDPrefix + "h:" + hex.EncodeToString(sum[:16])
	}
	return id
}

// SetQuotas makes c the node's quotas (nil: none) and, unless the node
// had quotas that count ids the same way (same patterns in the same
// order, only limits changed), recounts the cluster's keys under them.
// Every node of a cluster must be given the same file (SIGHUP each); each
// recount sets the counts from one scan.
func (n *Node) SetQuotas(c *quota.Config) error { return n.setQuotas(c, true) }

// UseQuotas makes c the node's quotas without a recount: the counts stay
// as the cluster holds them (a node starting with --quotas).
func (n *Node) UseQuotas(c *quota.Config) error { return n.setQuotas(c, false) }

// setQuotas is SetQuotas; without recount it keeps the counts as they
// are.
func (n *Node) setQuotas(c *quota.Config, recount bool) error {
	n.quota.reload.Lock()
	defer n.quota.reload.Unlock()
	qs, ok := n.store.(invalidatingStore).Store.(quotaStore)
	if !ok {
		return fmt.Errorf("cluster: the store does not support quotas")
	}
	n.quota.hooked.Do(func() {
		n.quota.wake = make(chan struct{}, 1)
		qs.SetExpireHook(n.quotaExpired)
		n.goLoop(n.quotaReleaser)
	})
	if c == nil {
		n.quota.cfg.Store(nil)
		qs.SetQuotas(nil)
		return nil
	}
	// The engine checks max_hash_fields; max_keys are counted here.
	local := &quota.Config{Rules: make([]quota.Rule, len(c.Rules))}
	keys := false
	for i, r := range c.Rules {
		local.Rules[i] = r
		local.Rules[i].MaxKeys = 0
		keys = keys || r.MaxKeys > 0
	}
	if c.Default != nil {
		d := *c.Default
		keys = keys || d.MaxKeys > 0
		d.MaxKeys = 0
		local.Default = &d
	}
	qs.SetQuotas(local)
	q := &nodeQuotas{set: quota.NewSet(c), keys: keys}
	old := n.quota.cfg.Swap(q)
	if !keys || !recount || (old != nil && old.keys && sameCounts(old.set.Config(), c)) {
		// The same counts under new limits: kept as they are.
		return nil
	}
	if err := n.quotaRecount(n.ctx, q); err != nil {
		return fmt.Errorf("%w (the new quotas are in force with the counts as they were)", err)
	}
	return nil
}

// sameCounts reports whether a and b count every id in the same count:
// the same patterns in the same order, each with max_keys or not, and a
// default with max_keys in both or neither.
func sameCounts(a, b *quota.Config) bool {
	if len(a.Rules) != len(b.Rules) || (a.Default != nil && a.Default.MaxKeys > 0) != (b.Default != nil && b.Default.MaxKeys > 0) {
		return false
	}
	for i := range a.Rules {
		if a.Rules[i].Pattern != b.Rules[i].Pattern || (a.Rules[i].MaxKeys > 0) != (b.Rules[i].MaxKeys > 0) {
			return false
		}
	}
	return true
}

// quotaRecount sets every count of q from a scan of the cluster's ids,
// and deletes the counts no quota of q uses. A key created or deleted
// while the scan runs may be counted wrong by one until the next
// recount.
func (n *Node) quotaRecount(ctx context.Context, q *nodeQuotas) error {
	counts := map[string]int64{}
	for _, r := range q.set.Config().Rules {
		if r.MaxKeys > 0 {
			counts[countID(r.Pattern, "")] = 0
		}
	}
	var stale []string
	var cursor uint64
	for {
		ids, next, err := n.Scan(ctx, cursor, "", 1000)
		if err != nil {
			return fmt.Errorf("cluster: quota recount: %w", err)
		}
		for _, id := range ids {
			if strings.HasPrefix(id, QuotaIDPrefix) {
				stale = append(stale, id)
				continue
			}
			if c := q.counter(id); c != nil {
				counts[quotaCountID(c)]++
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	for _, id := range stale {
		if _, ok := counts[id]; !ok {
			if err := n.applyCount(ctx, contract.Op{Type: contract.OpDelete, ID: id}); err != nil {
				return fmt.Errorf("cluster: quota recount: %w", err)
			}
		}
	}
	for id, v := range counts {
		if err := n.applyCount(ctx, contract.Op{Type: contract.OpSet, ID: id, Value: v}); err != nil {
			return fmt.Errorf("cluster: quota recount: %w", err)
		}
	}
	return nil
}

// Quotas lists every quota's usage across the cluster (quota.Set.Usage's
// order), nil without quotas.
func (n *Node) Quotas(ctx context.Context) ([]quota.Usage, error) {
	q := n.quota.cfg.Load()
	if q == nil {
		return nil, nil
	}
	cfg := q.set.Config()
	var out []quota.Usage
	for _, r := range cfg.Rules {
		u := quota.Usage{Quota: r.Pattern, Limits: r.Limits}
		if r.MaxKeys > 0 {
			v, err := n.Get(ctx, countID(r.Pattern, ""))
			if err != nil {
				return nil, err
			}
			u.Keys = v.Value
		}
		out = append(out, u)
	}
	if cfg.Default == nil || cfg.Default.MaxKeys == 0 {
		return out, nil
	}
	var defs []quota.Usage
	prefix := QuotaIDPrefix + "d:"
	var cursor uint64
	for {
		ids, next, err := n.Scan(ctx, cursor, prefix+"*", 1000)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if !strings.HasPrefix(id, prefix) {
				continue
			}
			v, err := n.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			if v.Value != 0 {
				defs = append(defs, quota.Usage{Quota: quota.DefaultName, Namespace: id[len(prefix):], Keys: v.Value, Limits: *cfg.Default})
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Namespace < defs[j].Namespace })
	return append(out, defs...), nil
}

// errQuotaID refuses a client's write to a quota count.
var errQuotaID = fmt.Errorf("%w: ids starting with %q hold the cluster's quota counts; clients cannot write them while quotas are on", contract.ErrInvalidArgument, QuotaIDPrefix)

// quotaReserved refuses a client's write of a quota count while quotas
// are on (the node's own writes of the counts call applyOps).
func (n *Node) quotaReserved(ops []contract.Op, batch bool) error {
	if n.quota.cfg.Load() == nil {
		return nil
	}
	for i := range ops {
		bad := strings.HasPrefix(ops[i].ID, QuotaIDPrefix)
		for _, src := range ops[i].Sources {
			bad = bad || strings.HasPrefix(src, QuotaIDPrefix)
		}
		if !bad {
			continue
		}
		if batch {
			return &contract.BatchError{Index: i, Err: errQuotaID}
		}
		return errQuotaID
	}
	return nil
}

// applyCount applies op, a write of a quota count, where it belongs.
func (n *Node) applyCount(ctx context.Context, op contract.Op) error {
	_, err := n.applyOps(ctx, []contract.Op{op}, false, contract.WriteOptions{Durability: contract.Sync})
	return err
}

// quotaReserve counts one more key under c for id, or refuses it at
// max_keys: a compare-and-set on c's count at the count's owner.
func (n *Node) quotaReserve(ctx context.Context, c *quota.Counter, id string) error {
	cid := quotaCountID(c)
	for try := 0; try < 1000; try++ {
		v, err := n.Get(ctx, cid)
		if err != nil {
			return err
		}
		if v.Value >= c.Limits().MaxKeys {
			return c.Exceeded(id, "max_keys", c.Limits().MaxKeys)
		}
		err = n.applyCount(ctx, contract.Op{Type: contract.OpSet, ID: cid, Value: v.Value + 1, CheckVersion: true, ExpectedVersion: v.Version})
		if !errors.Is(err, contract.ErrVersionConflict) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: quota count %s: too many concurrent reservations", contract.ErrUnavailable, cid)
}

// quotaAdd changes c's count by d without a check.
func (n *Node) quotaAdd(ctx context.Context, c *quota.Counter, d int64) error {
	return n.applyCount(ctx, contract.Op{Type: contract.OpAdd, ID: quotaCountID(c), Delta: d})
}

// quotaExpired is the engine's expire hook: the owner gives an expired
// key's room back (in the background: it runs under the key's lock).
func (n *Node) quotaExpired(id string) {
	if w, ok := n.quota.watch.Load(id); ok {
		w.(*atomic.Bool).Store(true)
	}
	if n.quota.cfg.Load().counter(id) == nil || n.ring.Snapshot().Owner(id) != n.self {
		return // a replica's copy, or not counted
	}
	n.quota.mu.Lock()
	n.quota.pending = append(n.quota.pending, id)
	n.quota.mu.Unlock()
	select {
	case n.quota.wake <- struct{}{}:
	default:
	}
}

// quotaReleaser gives back the room of expired keys until Close.
func (n *Node) quotaReleaser() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.quota.wake:
		}
		n.quota.mu.Lock()
		ids := n.quota.pending
		n.quota.pending = nil
		n.quota.mu.Unlock()
		for _, id := range ids {
			c := n.quota.cfg.Load().counter(id)
			if c == nil {
				continue
			}
			if err := n.quotaAdd(n.ctx, c, -1); err != nil {
				n.log.Warn("cluster: quota: giving back an expired key's room failed; the next recount (SIGHUP) repairs the count", "id", id, "err", err)
			}
		}
	}
}

// errQuotaRetry: an exclusive write found a missing id it holds no
// reservation for; nothing was applied.
var errQuotaRetry = errors.New("quota: reserve and retry")

// quotaID is one id of a write under a max_keys quota.
type quotaID struct {
	id       string
	c        *quota.Counter
	creates  bool // some op of the write may create it
	reserved bool
	before   bool // existed when the write started (exclusive)
	watch    *atomic.Bool
	delta    int64 // the count's change to make after the write
}

// removes reports whether op can delete its id, or give it a TTL.
func removesOrExpires(op *contract.Op) bool {
	switch op.Type {
	case contract.OpDelete, contract.OpHDel, contract.OpExpire:
		return true
	case contract.OpSet:
		return op.TTL > 0 || op.ExpireAt != 0
	}
	return false
}

// quotaRun is a write on its owner: it calls check under the ring's
// gate once the id is fenced, right before it applies, and done right
// after (check's error: nothing applied).
type quotaRun func(check, done func() error) error

// errQuotaSlow: a shared write found an id missing or with a TTL; nothing
// was applied.
var errQuotaSlow = errors.New("quota: not the shared path")

// quotaApply runs the write run of ops under the quotas: see the comment
// at the top of the file. Without a max_keys quota over ops' ids it runs
// it with no checks.
func (n *Node) quotaApply(ctx context.Context, ops []contract.Op, run quotaRun) error {
	q := n.quota.cfg.Load()
	if q == nil || !q.keys {
		return run(nil, nil)
	}
	var ids []*quotaID
	var at map[string]*quotaID // for batches
	exclusive := false
	for i := range ops {
		c := q.counter(ops[i].ID)
		if c == nil {
			continue
		}
		var qi *quotaID
		if len(ops) > 1 {
			if at == nil {
				at = map[string]*quotaID{}
			}
			qi = at[ops[i].ID]
		}
		if qi == nil {
			qi = &quotaID{id: ops[i].ID, c: c}
			if len(ops) > 1 {
				at[qi.id] = qi
			}
			ids = append(ids, qi)
		}
		if ops[i].Type != contract.OpDelete && ops[i].Type != contract.OpHDel && ops[i].Type != contract.OpExpire {
			qi.creates = true
		}
		exclusive = exclusive || removesOrExpires(&ops[i])
	}
	if len(ids) == 0 {
		return run(nil, nil)
	}
	if !exclusive {
		// The hot path: every id exists without a TTL.
		unlock := n.quota.lock(ids, true)
		err := run(func() error { return n.quotaAllPersistent(ctx, ids) }, nil)
		unlock()
		if !errors.Is(err, errQuotaSlow) {
			return err
		}
	}
	defer func() {
		// Reservations not used (refused, failed or retried writes).
		for _, qi := range ids {
			if qi.reserved {
				if err := n.quotaAdd(context.WithoutCancel(ctx), qi.c, -1); err != nil {
					n.log.Warn("cluster: quota: giving back a reservation failed; the next recount (SIGHUP) repairs the count", "id", qi.id, "err", err)
				}
			}
		}
	}()
	for try := 0; ; try++ {
		// Reserve for the ids missing here (a fence may still bring
		// some: the check under the gate sees).
		for _, qi := range ids {
			if !qi.creates || qi.reserved {
				continue
			}
			_, _, exists, err := n.store.TTL(ctx, qi.id)
			if err != nil {
				return err
			}
			if !exists || try > 0 {
				if err := n.quotaReserve(ctx, qi.c, qi.id); err != nil {
					return err
				}
				qi.reserved = true
			}
		}
		err := n.quotaExclusive(ctx, ids, run)
		if !errors.Is(err, errQuotaRetry) || try >= 3 {
			return err
		}
	}
}

// quotaAllPersistent is errQuotaSlow unless every id exists without a
// TTL.
func (n *Node) quotaAllPersistent(ctx context.Context, ids []*quotaID) error {
	for _, qi := range ids {
		_, hasTTL, exists, err := n.store.TTL(ctx, qi.id)
		if err != nil {
			return err
		}
		if !exists || hasTTL {
			return errQuotaSlow
		}
	}
	return nil
}

// quotaExclusive runs the write with ids' stripes held exclusively and
// settles the counts: a reservation is kept for an id the write created;
// an id it deleted gives its unit back.
func (n *Node) quotaExclusive(ctx context.Context, ids []*quotaID, run quotaRun) error {
	unlock := n.quota.lock(ids, false)
	defer unlock()
	for _, qi := range ids {
		qi.watch = new(atomic.Bool)
		n.quota.watch.Store(qi.id, qi.watch)
		qi.delta = 0
	}
	defer func() {
		for _, qi := range ids {
			n.quota.watch.Delete(qi.id)
		}
	}()
	checked := false
	check := func() error {
		for _, qi := range ids {
			_, _, exists, err := n.store.TTL(ctx, qi.id)
			if err != nil {
				return err
			}
			if !exists && qi.creates && !qi.reserved {
				return errQuotaRetry
			}
			qi.before = exists
			qi.watch.Store(false) // an expiry found by this read is the hook's
		}
		checked = true
		return nil
	}
	done := func() error {
		for _, qi := range ids {
			_, _, after, err := n.store.TTL(ctx, qi.id)
			if err != nil {
				return err
			}
			before := qi.before && !qi.watch.Load() // expired meanwhile: the hook gives it back
			switch {
			case after && !before:
				if qi.reserved {
					qi.reserved = false // kept: the write created it
				} else {
					qi.delta++ // re-created in the instant it expired
				}
			case !after && before:
				qi.delta--
			}
		}
		return nil
	}
	err := run(check, done)
	if !checked {
		return err
	}
	for _, qi := range ids {
		if qi.delta != 0 {
			if err := n.quotaAdd(context.WithoutCancel(ctx), qi.c, qi.delta); err != nil {
				n.log.Warn("cluster: quota: counting a write failed; the next recount (SIGHUP) repairs the count", "id", qi.id, "err", err)
			}
		}
	}
	return err
}

// lock takes the quota stripes of ids in index order, shared or not; it
// returns the unlock.
func (s *qstate) lock(ids []*quotaID, shared bool) func() {
	if len(ids) == 1 {
		mu := &s.stripes[xxhash.Sum64String(ids[0].id)%uint64(len(s.stripes))]
		if shared {
			mu.RLock()
			return mu.RUnlock
		}
		mu.Lock()
		return mu.Unlock
	}
	var idx []int
	for _, qi := range ids {
		idx = append(idx, int(xxhash.Sum64String(qi.id)%uint64(len(s.stripes))))
	}
	sort.Ints(idx)
	k := 0
	for i, v := range idx {
		if i == 0 || v != idx[i-1] {
			idx[k] = v
			k++
		}
	}
	idx = idx[:k]
	for _, i := range idx {
		if shared {
			s.stripes[i].RLock()
		} else {
			s.stripes[i].Lock()
		}
	}
	return func() {
		for _, i := range idx {
			if shared {
				s.stripes[i].RUnlock()
			} else {
				s.stripes[i].Unlock()
			}
		}
	}
}

// quotaBeforeCrossNode is the error of op, refused with err because its
// sources live elsewhere: the refusal of its quota instead when op would
// create a key past max_keys, which the embedded engine checks first.
func (n *Node) quotaBeforeCrossNode(ctx context.Context, op *contract.Op, err error) error {
	c := n.quota.cfg.Load().counter(op.ID)
	if c == nil {
		return err
	}
	if v, gerr := n.Get(ctx, op.ID); gerr != nil || v.Kind != contract.KindNone {
		return err
	}
	if v, gerr := n.Get(ctx, quotaCountID(c)); gerr == nil && v.Value >= c.Limits().MaxKeys {
		return c.Exceeded(op.ID, "max_keys", c.Limits().MaxKeys)
	}
	return err
}
