package tiered

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/glob"
	"github.com/counterd/counterd/internal/quota"
	redisstore "github.com/counterd/counterd/internal/store/redis"
	"github.com/redis/go-redis/v9"
)

// Quotas (docs/security.md, "Quotas") are counted in Redis, shared by
// every tiered node: the hash quotaKeys holds one field per quota ("r:" +
// pattern, or "d:" + namespace for the default) with its key count, and
// the field quotaSeq, raised by every change of a count (a recount applies
// only if no count changed while it scanned). The sorted set quotaExpiring
// holds the counted ids that have a time to live, scored by their expiry
// (Unix ms, wall clock, as Redis expires): the sweeper gives their room
// back once they are gone. Both keys carry one hash tag, so a script
// updates them together on Redis Cluster too; a counter's own keys are in
// another slot, hence reserve-then-create:
//
//  1. a write whose read-through found the counter in neither Redis nor
//     PostgreSQL reserves a key in quotaKeys (refused at max_keys, nothing
//     changed) just before the script that creates it (redisstore
//     Options.BeforeCreate);
//  2. the script ran: it created the counter (version 1), or another node
//     created it first, or it failed; the reservation is kept in the first
//     case and released in the others (kept when Redis did not answer:
//     the outcome is unknown, and counting one too many is the safe side).
//
// A node that dies between 1 and 2 leaves one key counted that does not
// exist; the recount (at SetQuotas, so at every start and SIGHUP, and every
// Options.QuotaRecountInterval) sets every count to what Redis and
// PostgreSQL hold.
const (
	quotaKeys     = "{counterd:quotas}:keys"
	quotaExpiring = "{counterd:quotas}:expiring"
	quotaSeq      = "_seq"
)

// reserveScript: KEYS quotaKeys, quotaExpiring; ARGV field, max (0: none),
// id. Reply {3} when the counts are missing (never counted, or Redis lost
// them): recount, then reserve again. If id is in quotaExpiring (an earlier instance of it expired and was
// not swept yet) its count passes to the new one: reply {2, score}. Else
// {1} after counting one more key, or {0, count} at the limit.
var reserveScript = redisstore.NewScript(`
if redis.call('HEXISTS', KEYS[1], '_seq') == 0 then return {3} end
local score = redis.call('ZSCORE', KEYS[2], ARGV[3])
if score then
  redis.call('ZREM', KEYS[2], ARGV[3])
  return {2, score}
end
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local max = tonumber(ARGV[2])
if max > 0 and n >= max then return {0, n} end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HINCRBY', KEYS[1], '_seq', 1)
return {1}
`)

// releaseScript: KEYS quotaKeys, quotaExpiring; ARGV field, id, mode.
// mode 'del': a counted key is gone (deleted): forget its expiry, count one
// less (nothing when the counts are missing: the recount that restores
// them counts what exists). 'swept': only if id is still in quotaExpiring (one sweeper wins),
// count one less. 'handback:<score>': a reservation that took over an
// expired instance's count was not used: put the instance back.
var releaseScript = redisstore.NewScript(`
if redis.call('HEXISTS', KEYS[1], '_seq') == 0 then return 0 end
local mode = ARGV[3]
if mode == 'swept' then
  if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then return 0 end
elseif string.sub(mode, 1, 9) == 'handback:' then
  redis.call('ZADD', KEYS[2], 'NX', string.sub(mode, 10), ARGV[2])
  return 1
else
  redis.call('ZREM', KEYS[2], ARGV[2])
end
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if n > 0 then redis.call('HINCRBY', KEYS[1], ARGV[1], -1) end
redis.call('HINCRBY', KEYS[1], '_seq', 1)
return 1
`)

// recountScript: KEYS quotaKeys; ARGV seq (as read before the scan), then
// field, count pairs. Replaces every count if quotaSeq is still seq;
// reply 1 if it did, 0 if a count changed meanwhile.
var recountScript = redisstore.NewScript(`
if (redis.call('HGET', KEYS[1], '_seq') or '0') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_seq', ARGV[1] + 1)
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] ~= '0' then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
`)

var quotaKeyList = []string{quotaKeys, quotaExpiring}

// quotaRef is the quota an id counts under.
type quotaRef struct {
	name, ns, field string
	limits          quota.Limits
}

func (q quotaRef) exceeded(id, limit string, max int64) error {
	return &quota.ExceededError{Quota: q.name, Namespace: q.ns, Limit: limit, Max: max, ID: id}
}

// quotaOf returns the quota id counts under in c (the first pattern in
// file order that matches, else the default of its namespace).
func quotaOf(c *quota.Config, id string) (quotaRef, bool) {
	for _, r := range c.Rules {
		if glob.Match(r.Pattern, id) {
			return quotaRef{name: r.Pattern, field: "r:" + r.Pattern, limits: r.Limits}, true
		}
	}
	if c.Default == nil {
		return quotaRef{}, false
	}
	ns := quota.Namespace(id)
	return quotaRef{name: quota.DefaultName, ns: ns, field: "d:" + ns, limits: *c.Default}, true
}

// quotaRefOf is quotaOf under the quotas in force.
func (b *Backend) quotaRefOf(id string) (quotaRef, bool) {
	c := b.quotas.Load()
	if c == nil {
		return quotaRef{}, false
	}
	return quotaOf(c, id)
}

// creation is a write's pending reservation (see reserve-then-create).
type creation struct {
	id       string
	ref      quotaRef
	reserved bool
	handback string // the expired instance's score when its count was taken over
}

type creationKey struct{}

// beforeCreate is redisstore's Options.BeforeCreate: it reserves a key for
// the write in ctx's creation, if any.
func (b *Backend) beforeCreate(ctx context.Context, id string) error {
	c, _ := ctx.Value(creationKey{}).(*creation)
	if c == nil || c.id != id || c.reserved {
		return nil
	}
	var rs []any
	for attempt := 0; ; attempt++ {
		r, err := b.rs.Eval(ctx, "quota_reserve", reserveScript, quotaKeyList, c.ref.field, c.ref.limits.MaxKeys, id)
		if err != nil {
			return err
		}
		if rs, _ = r.([]any); len(rs) == 0 {
			return fmt.Errorf("%w: quota reserve reply %v", redisstore.ErrUnavailable, r)
		}
		if rs[0] != int64(3) {
			break
		}
		if attempt > 0 {
			return fmt.Errorf("%w: the quota counts are missing in Redis after a recount", redisstore.ErrUnavailable)
		}
		if err := b.recountNow(ctx); err != nil {
			return err
		}
	}
	switch rs[0] {
	case int64(0):
		// Another write (here or on another node) may have created id
		// since this one missed it, its reservation among those counted:
		// then this write only adds to it.
		if n, err := b.rs.Client().Exists(ctx, redisstore.MetaKey(id)).Result(); err == nil && n == 1 {
			return nil
		}
		return c.ref.exceeded(id, "max_keys", c.ref.limits.MaxKeys)
	case int64(2):
		c.handback = fmt.Sprint(rs[1])
	}
	c.reserved = true
	return nil
}

// settle keeps a write's reservation if the write created the counter
// (version 1) or may have (Redis did not answer), and releases it
// otherwise.
func (b *Backend) settle(c *creation, res contract.Result, err error) {
	if !c.reserved {
		return
	}
	if err == nil && res.Version == 1 {
		return
	}
	var re *redisstore.ReplyError
	var qe *quota.ExceededError
	if err != nil && !errors.As(err, &re) && !errors.As(err, &qe) {
		return // unknown outcome (or a failure after the create): keep it
	}
	mode := "del"
	if c.handback != "" {
		mode = "handback:" + c.handback
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.rs.Eval(ctx, "quota_release", releaseScript, quotaKeyList, c.ref.field, c.id, mode); err != nil {
		b.opts.Logger.Warn("tiered: releasing a quota reservation failed; the next recount corrects it", "id", c.id, "err", err)
	}
}

// creates reports whether an op of type t may create its counter.
func creates(t contract.OpType) bool {
	switch t {
	case contract.OpAdd, contract.OpSet, contract.OpPFAdd, contract.OpPFMerge, contract.OpHAdd, contract.OpHSet:
		return true
	}
	return false
}

// deleted gives back the key of id, which a delete removed.
func (b *Backend) deleted(ctx context.Context, id string) error {
	ref, ok := b.quotaRefOf(id)
	if !ok {
		return nil
	}
	_, err := b.rs.Eval(ctx, "quota_release", releaseScript, quotaKeyList, ref.field, id, "del")
	return err
}

// expiring notes that id (counted under a quota) expires after ttl, so the
// sweeper gives its room back then.
func (b *Backend) expiring(ctx context.Context, id string, ttl time.Duration) error {
	if ttl <= 0 || b.quotas.Load() == nil {
		return nil
	}
	if _, ok := b.quotaRefOf(id); !ok {
		return nil
	}
	at := time.Now().Add(ttl).UnixMilli()
	return b.rs.Client().ZAdd(ctx, quotaExpiring, redis.Z{Score: float64(at), Member: id}).Err()
}

// sweepQuotas gives back the room of counted ids whose time to live has
// passed and that are gone; ids whose time to live was extended get their
// new expiry, ids made persistent are forgotten (they stay counted).
func (b *Backend) sweepQuotas(ctx context.Context) error {
	if b.quotas.Load() == nil {
		return nil
	}
	now := time.Now().UnixMilli()
	for range 16 { // at most 16 × 256 ids a pass
		ids, err := b.rs.Client().ZRangeByScore(ctx, quotaExpiring, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: 256}).Result()
		if err != nil {
			return err
		}
		for _, id := range ids {
			rec, found, err := b.rs.Get(ctx, id)
			switch {
			case err != nil:
				return err
			case found && rec.TTL > 0:
				err = b.rs.Client().ZAddXX(ctx, quotaExpiring, redis.Z{Score: float64(time.Now().Add(rec.TTL).UnixMilli()), Member: id}).Err()
			case found:
				err = b.rs.Client().ZRem(ctx, quotaExpiring, id).Err()
			default:
				field := "d:" + quota.Namespace(id)
				if ref, ok := b.quotaRefOf(id); ok {
					field = ref.field
				}
				_, err = b.rs.Eval(ctx, "quota_release", releaseScript, quotaKeyList, field, id, "swept")
			}
			if err != nil {
				return err
			}
		}
		if len(ids) < 256 {
			return nil
		}
	}
	return nil
}

// SetQuotas puts c in force (nil: none) and recounts every quota's keys
// from what Redis and PostgreSQL hold (implements contract.QuotaBackend).
// If the recount fails the quotas in force before stay.
func (b *Backend) SetQuotas(c *quota.Config) error {
	b.quotaMu.Lock()
	defer b.quotaMu.Unlock()
	prev := b.quotas.Swap(c)
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.recountQuotas(ctx, c); err != nil {
		b.quotas.Store(prev) // the quotas in force stay
		return err
	}
	return nil
}

// recountQuotas sets every count of c to the ids Redis and PostgreSQL hold
// (after this node's pending changes are flushed). A count that changes
// while it scans makes it start again (up to 5 times; then the counts
// stay as they are until the next recount).
func (b *Backend) recountQuotas(ctx context.Context, c *quota.Config) error {
	if err := b.agg.Flush(ctx); err != nil {
		return unavailable(err)
	}
	for range 5 {
		seq, err := b.rs.Client().HGet(ctx, quotaKeys, quotaSeq).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return mapErr(err)
		}
		if seq == "" {
			seq = "0"
		}
		ids := make(map[string]struct{})
		var mu sync.Mutex
		if err := b.rs.IDs(ctx, func(id string) { mu.Lock(); ids[id] = struct{}{}; mu.Unlock() }); err != nil {
			return mapErr(err)
		}
		const page = 10000
		for off := 0; ; off += page {
			pids, err := b.pg.IDs(ctx, off, page)
			if err != nil {
				return unavailable(err)
			}
			for _, id := range pids {
				ids[id] = struct{}{}
			}
			if len(pids) < page {
				break
			}
		}
		counts := make(map[string]int64)
		for id := range ids {
			if ref, ok := quotaOf(c, id); ok {
				counts[ref.field]++
			}
		}
		args := []any{seq}
		for f, n := range counts {
			args = append(args, f, n)
		}
		r, err := b.rs.Eval(ctx, "quota_recount", recountScript, []string{quotaKeys}, args...)
		if err != nil {
			return mapErr(err)
		}
		if r == int64(1) {
			return nil
		}
	}
	b.opts.Logger.Warn("tiered: quota recount skipped: counts kept changing while it scanned; the next recount retries")
	return nil
}

// recountNow recounts under the quotas in force.
func (b *Backend) recountNow(ctx context.Context) error {
	b.quotaMu.Lock()
	defer b.quotaMu.Unlock()
	c := b.quotas.Load()
	if c == nil {
		return nil
	}
	return b.recountQuotas(ctx, c)
}

// recountLoop recounts every QuotaRecountInterval until Close.
func (b *Backend) recountLoop() {
	b.periodically(b.recountDone, b.opts.QuotaRecountInterval, 5*time.Minute, "tiered: quota recount failed", b.recountNow)
}

// sweepLoop runs sweepQuotas every QuotaSweepInterval until Close.
func (b *Backend) sweepLoop() {
	b.periodically(b.sweepDone, b.opts.QuotaSweepInterval, time.Minute, "tiered: quota expiry sweep failed", b.sweepQuotas)
}

// Quotas lists every quota's count as Redis holds it now (implements
// contract.QuotaBackend): the quotas in file order, then the default's
// namespaces that hold keys.
func (b *Backend) Quotas(ctx context.Context) ([]quota.Usage, error) {
	c := b.quotas.Load()
	if c == nil {
		return nil, nil
	}
	m, err := b.rs.Client().HGetAll(ctx, quotaKeys).Result()
	if err != nil {
		return nil, mapErr(err)
	}
	n := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	var out []quota.Usage
	for _, r := range c.Rules {
		out = append(out, quota.Usage{Quota: r.Pattern, Keys: n("r:" + r.Pattern), Limits: r.Limits})
	}
	if c.Default != nil {
		var defs []quota.Usage
		for f := range m {
			if ns, ok := strings.CutPrefix(f, "d:"); ok && n(f) != 0 {
				defs = append(defs, quota.Usage{Quota: quota.DefaultName, Namespace: ns, Keys: n(f), Limits: *c.Default})
			}
		}
		sort.Slice(defs, func(i, j int) bool { return defs[i].Namespace < defs[j].Namespace })
		out = append(out, defs...)
	}
	return out, nil
}

// maxFields is the max_hash_fields of id's quota (0: none).
func (b *Backend) maxFields(id string) int64 {
	if ref, ok := b.quotaRefOf(id); ok {
		return ref.limits.MaxHashFields
	}
	return 0
}

// fieldLimitErr turns redisstore.ErrFieldLimit into the quota's error.
func (b *Backend) fieldLimitErr(id string, err error) error {
	if !errors.Is(err, redisstore.ErrFieldLimit) {
		return err
	}
	ref, ok := b.quotaRefOf(id)
	if !ok {
		ref = quotaRef{name: quota.DefaultName, ns: quota.Namespace(id)}
	}
	var re *redisstore.ReplyError
	max := ref.limits.MaxHashFields
	if errors.As(err, &re) {
		if v, e := strconv.ParseInt(re.Detail, 10, 64); e == nil {
			max = v
		}
	}
	return ref.exceeded(id, "max_hash_fields", max)
}

var _ contract.QuotaBackend = (*Backend)(nil)
