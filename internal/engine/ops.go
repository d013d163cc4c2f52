package engine

import (
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// The functions applyLocked dispatches to, one per op type. Each applies
// one op to the locked entry r (live: r holds a live counter) and fills
// res, whose ID is set; on error the entry is unchanged.

// changedLocked ends an op that changed r: a new version (touch), and r's
// kind and version in res.
func (e *Engine) changedLocked(r *ref, now int64, res *contract.Result) {
	e.touch(r, now)
	res.Kind, res.Version, res.Changed = r.e.kind(), r.e.version(), true
}

// deletedLocked deletes the live counter r and reports it in res with the
// version it is deleted at (a tombstone's, replica.go).
func (e *Engine) deletedLocked(r *ref, res *contract.Result) {
	res.Kind, res.Version, res.Changed = r.e.kind(), r.e.version()+1, true
	e.clearLocked(r)
}

// additiveValue is the value an add or set reports: a window counter's sum
// at now, else the entry's value.
func additiveValue(en *entry, now int64) int64 {
	if en.kind() == contract.KindWindow {
		return en.ext().state.(*counter.Window).Sum(time.Unix(0, now))
	}
	return en.value
}

func (e *Engine) applyAdd(r *ref, op *contract.Op, now int64, live bool, res *contract.Result, values bool) error {
	en := r.e
	k := op.Kind
	if k == contract.KindFloat {
		return e.applyAddFloat(r, op, now, live, res)
	}
	if live && en.kind() == contract.KindFloat && (k == contract.KindNone || k == contract.KindCounter) {
		// Redis's INCR after INCRBYFLOAT: an integer value is a counter again.
		v, ok := en.ext().state.(*counter.Float).Int64()
		if !ok {
			t := en.ext().state.(*counter.Float).Text()
			if len(t) > 40 {
				t = t[:40] + "..."
			}
			return fmt.Errorf("%w: %q holds %s", contract.ErrNotInteger, op.ID, t)
		}
		if _, ok := addInt64(v, op.Delta); !ok {
			return overflow(op.ID)
		}
		e.setKindLocked(r, contract.KindCounter, v, nil)
	}
	if live {
		if !en.kind().Additive() || (k != contract.KindNone && k != en.kind()) {
			return wrongKind(op.ID, en.kind(), op.Type)
		}
	} else {
		if k == contract.KindNone {
			k = contract.KindCounter
		}
		if err := e.create(r, k, op); err != nil {
			return err
		}
	}
	if x := en.ext(); op.At != 0 && x != nil && x.roll != nil && !x.roll.Keeps(op.At, now) {
		if !live {
			e.clearLocked(r)
		}
		return tooLate(op.ID, op.At, "every kept rollup's retention")
	}
	if err := e.addLocked(r, op, now); err != nil {
		if !live {
			e.clearLocked(r)
		}
		return err
	}
	if x := en.ext(); x != nil && x.roll != nil {
		if op.At != 0 {
			x.roll.AddAt(op.At, now, op.Delta)
		} else {
			x.roll.Add(now, op.Delta)
		}
	}
	e.changedLocked(r, now, res)
	if values {
		res.Value = additiveValue(en, now)
	}
	return nil
}

// checkExpireAt bounds an absolute expiry like Validate bounds a TTL.
func (e *Engine) checkExpireAt(op *contract.Op, now int64) error {
	if op.ExpireAt != 0 && time.Duration(op.ExpireAt-now) > e.limits.MaxTTL {
		return fmt.Errorf("%w: ttl longer than %v", contract.ErrInvalidArgument, e.limits.MaxTTL)
	}
	return nil
}

// applyAddFloat adds the text op.Float to the float counter r, creating
// it, or converting a counter of kind counter (its int64 is exact).
func (e *Engine) applyAddFloat(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	en := r.e
	if live && en.kind() != contract.KindFloat && en.kind() != contract.KindCounter {
		return wrongKind(op.ID, en.kind(), op.Type)
	}
	d, err := counter.ParseFloat(op.Float)
	if err != nil {
		return fmt.Errorf("%w: %q", contract.ErrNotFloat, op.Float)
	}
	var f *counter.Float
	switch {
	case !live:
		f = &counter.Float{}
	case en.kind() == contract.KindCounter:
		f = counter.FloatOf(en.value)
	default:
		f = en.ext().state.(*counter.Float).Clone()
	}
	if _, err := f.AddValue(d); err != nil {
		return fmt.Errorf("%w: %q", contract.ErrFloatRange, op.ID)
	}
	switch {
	case !live:
		if err := e.create(r, contract.KindFloat, op); err != nil {
			return err
		}
		en.ext().state = f
	case en.kind() == contract.KindCounter:
		e.setKindLocked(r, contract.KindFloat, 0, f)
	default:
		en.ext().state = f
	}
	e.changedLocked(r, now, res)
	res.Float = f.Text()
	return nil
}

// setKindLocked turns the live counter r into kind k with value v and
// state st, keeping its TTL, version and rollups (between counter and
// float, the two kinds Redis converts between). Caller holds r's lock.
func (e *Engine) setKindLocked(r *ref, k contract.Kind, v int64, st any) {
	en := r.e
	en.setKind(k)
	en.value = v
	switch x := en.ext(); {
	case st != nil:
		if x == nil {
			x = &ext{}
			en.setExt(x)
		}
		x.state = st
	case x != nil:
		x.state = nil
		if x.expires == 0 && x.roll == nil {
			en.setExt(nil)
		}
	}
}

func (e *Engine) applySet(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	en := r.e
	if live && en.kind() != contract.KindCounter && en.kind() != contract.KindFloat {
		return wrongKind(op.ID, en.kind(), op.Type)
	}
	if op.CheckVersion && ((live && en.version() != op.ExpectedVersion) || (!live && op.ExpectedVersion != 0)) {
		have := uint64(0)
		if live {
			have = en.version()
		}
		return fmt.Errorf("%w: %q is at version %d, not %d", contract.ErrVersionConflict, op.ID, have, op.ExpectedVersion)
	}
	if (op.SetMode == contract.SetIfAbsent && live) || (op.SetMode == contract.SetIfExists && !live) {
		if live {
			res.Kind, res.Value, res.Version = en.kind(), en.value, en.version()
		}
		return nil
	}
	if err := e.checkExpireAt(op, now); err != nil {
		return err
	}
	var fl *counter.Float
	if op.Float != "" {
		var err error
		if fl, err = counter.FloatOfText(op.Float); err != nil { // Validate checks it: not reached
			return mapErr(op.ID, err)
		}
	}
	switch {
	case !live && fl != nil:
		if err := e.create(r, contract.KindFloat, op); err != nil {
			return err
		}
		en.ext().state = fl
	case !live:
		if err := e.create(r, contract.KindCounter, op); err != nil {
			return err
		}
	case fl != nil: // Redis SET overwrites any string
		e.setKindLocked(r, contract.KindFloat, 0, fl)
	case en.kind() == contract.KindFloat:
		e.setKindLocked(r, contract.KindCounter, 0, nil)
	}
	en.value = op.Value
	switch {
	case op.ExpireAt != 0:
		e.setExpiresLocked(r, op.ExpireAt)
	case op.TTL > 0:
		e.setExpiresLocked(r, expiry(now, op.TTL))
	case !op.KeepTTL:
		e.setExpiresLocked(r, 0)
	}
	e.changedLocked(r, now, res)
	res.Value = additiveValue(en, now)
	if fl != nil {
		res.Float = fl.Text()
	}
	return nil
}

func (e *Engine) applyDelete(r *ref, live bool, res *contract.Result) error {
	if live {
		e.deletedLocked(r, res)
	}
	return nil
}

func (e *Engine) applyExpire(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	if !live {
		return nil
	}
	if err := e.checkExpireAt(op, now); err != nil {
		return err
	}
	en := r.e
	ttl := op.TTL
	if op.ExpireAt != 0 {
		if ttl = time.Duration(op.ExpireAt - now); ttl <= 0 {
			ttl = -1
		}
	}
	switch {
	case ttl < 0:
		e.deletedLocked(r, res)
		return nil
	case ttl == 0:
		if x := en.ext(); x == nil || x.expires == 0 {
			res.Kind, res.Value, res.Version = en.kind(), en.value, en.version()
			return nil
		}
		e.setExpiresLocked(r, 0)
	default:
		e.setExpiresLocked(r, expiry(now, ttl))
	}
	e.changedLocked(r, now, res)
	return nil
}

func (e *Engine) applyPFAdd(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	en := r.e
	if live && en.kind() != contract.KindHLL {
		return wrongKind(op.ID, en.kind(), op.Type)
	}
	if !live {
		if err := e.create(r, contract.KindHLL, op); err != nil {
			return err
		}
		res.Changed = true // like Redis: creating the key counts as a change
	}
	if roll := en.ext().roll; op.At != 0 && roll != nil && !roll.Keeps(op.At, now) {
		if !live {
			e.clearLocked(r)
		}
		return tooLate(op.ID, op.At, "every kept rollup's retention")
	}
	h := en.ext().state.(*counter.HLL)
	rollChanged := false
	roll := en.ext().roll
	// The items' hashes (what h.Add hashes) go in blocks to the sketch
	// and to the rollup's, each of which takes a block at once
	// (counter.HLL.AddHashes: one merge into a sparse sketch).
	var xs [64]uint64
	for items := op.Items; len(items) > 0; {
		n := min(len(items), len(xs))
		for k, it := range items[:n] {
			xs[k] = xxhash.Sum64(it)
		}
		items = items[n:]
		if h.AddHashes(xs[:n]) {
			res.Changed = true
		}
		switch {
		case roll == nil:
		case op.At != 0:
			if roll.AddHashesAt(op.At, now, xs[:n]) {
				rollChanged = true
			}
		default:
			for _, x := range xs[:n] {
				if roll.AddHash(now, x) {
					rollChanged = true
				}
			}
		}
	}
	if op.Estimate {
		res.Value = int64(h.Count())
	}
	if !res.Changed {
		if rollChanged { // today's sketch changed, the counter did not
			e.markDirtyLocked(r)
		}
		res.Kind, res.Version = en.kind(), en.version()
		return nil
	}
	e.changedLocked(r, now, res)
	return nil
}

func (e *Engine) applyPFMerge(r *ref, op *contract.Op, srcs []ref, now int64, live bool, res *contract.Result) error {
	en := r.e
	if live && en.kind() != contract.KindHLL {
		return wrongKind(op.ID, en.kind(), op.Type)
	}
	var hs []*counter.HLL
	for i := range srcs {
		s := &srcs[i]
		if s.e == nil || s.e == en || !e.liveLocked(s, now) {
			continue
		}
		if s.e.kind() != contract.KindHLL {
			return wrongKind(op.Sources[i], s.e.kind(), op.Type)
		}
		hs = append(hs, s.e.ext().state.(*counter.HLL))
	}
	var dst *counter.HLL
	if live {
		dst = en.ext().state.(*counter.HLL).Clone()
	} else {
		p := op.HLLPrecision
		if p == 0 && len(hs) > 0 {
			p = hs[0].Precision()
		}
		if p == 0 {
			p = e.cfg.HLLPrecision
		}
		var err error
		if dst, err = counter.NewHLL(p); err != nil {
			return fmt.Errorf("%w: %v", contract.ErrInvalidArgument, err)
		}
	}
	for _, h := range hs {
		if err := dst.Merge(h); err != nil {
			return mapErr(op.ID, err)
		}
	}
	if !live {
		if err := e.create(r, contract.KindHLL, op); err != nil {
			return err
		}
	}
	en.ext().state = dst
	if roll := en.ext().roll; roll != nil {
		for _, h := range hs {
			if err := roll.MergeSketch(now, h); err != nil {
				return mapErr(op.ID, err)
			}
		}
	}
	e.changedLocked(r, now, res)
	res.Value = int64(dst.Count())
	return nil
}

// hashLocked returns r's hash, creating it when r is not live; an error
// if r is a counter of another kind.
func (e *Engine) hashLocked(r *ref, op *contract.Op, live bool) (*counter.Hash, error) {
	en := r.e
	if live && en.kind() != contract.KindHash {
		return nil, wrongKind(op.ID, en.kind(), op.Type)
	}
	if live {
		h := en.ext().state.(*counter.Hash)
		return h, e.checkHashFieldsLocked(op, h)
	}
	if err := e.checkHashFieldsLocked(op, nil); err != nil {
		return nil, err
	}
	if err := e.create(r, contract.KindHash, op); err != nil {
		return nil, err
	}
	return en.ext().state.(*counter.Hash), nil
}

func (e *Engine) applyHAdd(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	h, err := e.hashLocked(r, op, live)
	if err != nil {
		return err
	}
	fs, err := h.Add(op.Fields)
	if err != nil {
		if !live {
			e.clearLocked(r)
		}
		return mapErr(op.ID, err)
	}
	res.Fields = fs
	e.changedLocked(r, now, res)
	return nil
}

func (e *Engine) applyHSet(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	h, err := e.hashLocked(r, op, live)
	if err != nil {
		return err
	}
	en := r.e
	n, err := h.Set(op.Fields, op.SetMode == contract.SetIfAbsent)
	if err != nil { // Validate checks the texts: not reached
		if !live {
			e.clearLocked(r)
		}
		return mapErr(op.ID, err)
	}
	res.Value = int64(n)
	if n == 0 && op.SetMode == contract.SetIfAbsent {
		res.Kind, res.Version = en.kind(), en.version()
		return nil
	}
	e.changedLocked(r, now, res)
	return nil
}

func (e *Engine) applyHDel(r *ref, op *contract.Op, now int64, live bool, res *contract.Result) error {
	if !live {
		return nil
	}
	en := r.e
	if en.kind() != contract.KindHash {
		return wrongKind(op.ID, en.kind(), op.Type)
	}
	h := en.ext().state.(*counter.Hash)
	n := h.Del(op.Names...)
	res.Value = int64(n)
	switch {
	case n == 0:
		res.Kind, res.Version = en.kind(), en.version()
	case h.Len() == 0: // like Redis: a hash without fields does not exist
		e.deletedLocked(r, res)
	default:
		e.changedLocked(r, now, res)
	}
	return nil
}
