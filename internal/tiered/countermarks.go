package tiered

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/ctxwait"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// Dedupe marks beside each counter (contract.CounterMarker), for the
// pipeline's consumer on tiered nodes. A mark is a Redis key in its
// counter's slot, cmarkPrefix+"{"+id+"}:"+mark (the counter's hash tag,
// so it is in the counter's Redis Cluster slot), expiring with the
// rules' dedupe TTL. A marked op runs in one script with its marks
// (redisstore.AddMarked, HAddMarked): if one exists nothing is written,
// else the op is written and its marks set. The marks are written behind
// to PostgreSQL with the op's delta, under one Aggregator.Hold, so in the
// same transaction: as idempotency records (table idempotency_records,
// key cmarkRecord: control bytes, which clients' keys cannot hold, keep
// them apart), with the TTL as their expiry. After Redis lost data
// (FLUSHALL, a master restarted empty), the slot's idempotency marker
// (idem.go) is missing or names a time not yet reached: the script then
// writes nothing and the marks are looked up in this node's write-behind
// and in PostgreSQL before the op is written (askDurable, as a won
// idempotency claim is).

const (
	cmarkPrefix = "counterd:cmark:"
	// markWorkers bounds the ops of one call in flight (one script each).
	markWorkers = 16
	maxMarkLen  = 1024
)

var _ contract.CounterMarker = (*Backend)(nil)

// cmarkKey is the Redis key of mark on counter id.
func cmarkKey(id, mark string) string { return cmarkPrefix + "{" + id + "}:" + mark }

// cmarkRecord is the idempotency record key of mark on counter id.
func cmarkRecord(id, mark string) string { return "\x1fcmark\x1f" + id + "\x1f" + mark }

type markedKey struct{}

// markedWrite is a marked op's marks and what its script did, carried
// to add and hadd (apply.go) in the context.
type markedWrite struct {
	marks *redisstore.Marks
	reply redisstore.MarkedReply
}

func markedOf(ctx context.Context) *markedWrite {
	mw, _ := ctx.Value(markedKey{}).(*markedWrite)
	return mw
}

// ApplyCounterMarked: see contract.CounterMarker. Ops are validated
// first (bad input changes nothing: a *contract.BatchError names the op);
// marks guard adds (not of floats) and hash adds, other ops must come
// without marks. The ops run concurrently; an op refused at run time
// (wrong kind, too late) is a *contract.BatchError naming it (the others
// ran); a Redis or PostgreSQL failure is ErrUnavailable, the outcome of
// some ops unknown (calling again is safe). A sync write waits for the
// write-behind once, after every op.
func (b *Backend) ApplyCounterMarked(ctx context.Context, ops []contract.MarkedOp, ttl time.Duration, wo contract.WriteOptions) ([][]string, error) {
	if ttl <= 0 || ttl > contract.MaxTTL {
		return nil, fmt.Errorf("%w: mark ttl %v", contract.ErrInvalidArgument, ttl)
	}
	for i := range ops {
		if err := validateMarked(&ops[i], b.limits); err != nil {
			return nil, &contract.BatchError{Index: i, Err: err}
		}
	}
	seen := make([][]string, len(ops))
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	sem := make(chan struct{}, markWorkers)
	for i := range ops {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			seen[i], errs[i] = b.applyMarkedOp(ctx, &ops[i], ttl)
		})
	}
	wg.Wait()
	b.ops.Add(uint64(len(ops)))
	for _, err := range errs {
		if errors.Is(err, contract.ErrUnavailable) {
			return nil, err
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, &contract.BatchError{Index: i, Err: err}
		}
	}
	return seen, b.durable(ctx, wo, time.Now())
}

func validateMarked(mo *contract.MarkedOp, l contract.Limits) error {
	if err := mo.Op.Validate(l); err != nil {
		return err
	}
	if err := refuseFloatFields(&mo.Op); err != nil {
		return err
	}
	if len(mo.Marks) == 0 {
		return nil
	}
	if !(mo.Op.Type == contract.OpAdd && mo.Op.Kind != contract.KindFloat) && mo.Op.Type != contract.OpHAdd {
		return fmt.Errorf("%w: %q: dedupe marks guard adds and hash adds, not %s", contract.ErrInvalidArgument, mo.Op.ID, mo.Op.Type)
	}
	for _, m := range mo.Marks {
		if m == "" || len(m) > maxMarkLen || strings.IndexByte(m, 0) >= 0 {
			return fmt.Errorf("%w: %q: a dedupe mark is 1..%d bytes without NUL", contract.ErrInvalidArgument, mo.Op.ID, maxMarkLen)
		}
	}
	return nil
}

// applyMarkedOp applies one validated op with its marks; it returns the
// marks that exist (nothing applied) or nil (applied).
func (b *Backend) applyMarkedOp(ctx context.Context, mo *contract.MarkedOp, ttl time.Duration) ([]string, error) {
	if len(mo.Marks) == 0 {
		_, err := b.apply(ctx, &mo.Op)
		return nil, err
	}
	id := mo.Op.ID
	vk := redisstore.ValueKey(id)
	mw := &markedWrite{marks: &redisstore.Marks{Slot: markKey(vk), Now: b.Now().UnixNano(), TTL: ttl}}
	for _, m := range mo.Marks {
		mw.marks.Keys = append(mw.marks.Keys, cmarkKey(id, m))
	}
	// The script journals what it applies (journal.go).
	info := &markedOpInfo{op: "add", id: id, delta: mo.Op.Delta, at: b.Now(), created: b.Now(), marks: mo.Marks}
	if mo.Op.Type == contract.OpHAdd {
		info.op, info.delta, info.fields = "hadd", 0, mo.Op.Fields
	} else if mo.Op.At != 0 {
		info.at = time.Unix(0, mo.Op.At)
	}
	b.journal(mw, info)
	for attempt := 0; ; attempt++ {
		mw.reply = redisstore.MarkedReply{}
		// The delta and the marks' records commit in one PostgreSQL
		// transaction (Commit in idem.go does the same).
		h := &hold{release: b.agg.Hold()}
		_, err := b.apply(context.WithValue(context.WithValue(ctx, holdKey{}, h), markedKey{}, mw), &mo.Op)
		if err == nil && mw.reply.Written() {
			now := b.Now()
			for _, m := range mo.Marks {
				b.agg.AddIdem(postgres.IdemRecord{Key: cmarkRecord(id, m), Record: []byte{1}, Created: now, Expires: now.Add(ttl)})
			}
		}
		h.letGo()
		switch {
		case err != nil:
			return nil, err
		case mw.reply.Written():
			return nil, nil
		case len(mw.reply.Seen) > 0:
			seen := make([]string, 0, len(mw.reply.Seen))
			for _, k := range mw.reply.Seen {
				if k >= 0 && k < len(mo.Marks) {
					seen = append(seen, mo.Marks[k])
				}
			}
			return seen, nil
		case attempt > 0:
			return nil, unavailable(errors.New("tiered: a marked write asked for the durable tier twice"))
		}
		// The slot's marker asks: Redis may have lost marks.
		found, err := b.durableMarks(ctx, id, vk, mo.Marks, mw.reply.Marker)
		if err != nil || len(found) > 0 {
			return found, err
		}
		mw.marks.Now = 0 // asked: write unless a mark exists in Redis
	}
}

// durableMarks returns which of marks on id this node's write-behind or
// PostgreSQL holds, when the slot's marker (as the script read it) says
// Redis may lack them.
func (b *Backend) durableMarks(ctx context.Context, id, vk string, marks []string, marker string) ([]string, error) {
	keys := make([]string, len(marks))
	var found []string
	pending := func() {
		for i, m := range marks {
			keys[i] = cmarkRecord(id, m)
			if _, ok := b.agg.Idem(keys[i]); ok {
				found = append(found, m)
			}
		}
	}
	pending()
	if len(found) > 0 {
		return found, nil
	}
	ask, set, err := b.askDurable(ctx, vk, marker, false)
	if err != nil || !ask {
		return nil, err
	}
	look := func() ([]string, error) {
		b.idemLookups.Add(1)
		got, err := b.pg.IdemKeys(ctx, keys, b.Now())
		if err != nil {
			return nil, unavailable(err)
		}
		for i, m := range marks {
			if got[keys[i]] {
				found = append(found, m)
			}
		}
		return found, nil
	}
	if found, err = look(); err != nil || len(found) > 0 {
		return found, err
	}
	// Just after a loss another node's write-behind may still hold them.
	wait := time.Duration(set + int64(b.idemSettle()) - time.Now().UnixNano())
	if set == 0 || wait <= 0 {
		return nil, nil
	}
	if err := ctxwait.Sleep(ctx, wait); err != nil {
		return nil, unavailable(err)
	}
	b.idemSettles.Add(1)
	if pending(); len(found) > 0 {
		return found, nil
	}
	return look()
}
