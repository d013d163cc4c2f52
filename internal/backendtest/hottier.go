package backendtest

import (
	"errors"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// A keyed request is applied at most once even when the backend's hot
// tier loses its data: the tiered mode's Redis (FLUSHALL, a master
// restarted empty), the embedded engine's memory (a restart), a cluster
// node's (the owner restarting). Setup.LoseHotTier makes the backend lose
// it; the group runs last, as the backend it leaves may be another one
// (a restarted engine), and skips with a log line without the hook.

// hotTierCases are the lost-hot-tier cases.
func hotTierCases() []tcase {
	return []tcase{
		lostMarkCase(), // each case hands the backend it leaves to the next one
		{"keyed retry after the hot tier lost its data is not applied twice", func(e *env) {
			if e.s.LoseHotTier == nil {
				e.t.Skip("Setup.LoseHotTier unset: no way to make this backend lose its hot tier")
			}
			id, bid := e.id("c"), e.id("b")
			key, bkey := e.keyOf("lost"), e.keyOf("lost-batch")
			op := add(id, contract.KindNone, 5)
			batch := []contract.Op{add(bid, contract.KindNone, 3), add(id, contract.KindNone, 4)}
			sync := func(key string) contract.WriteOptions {
				return contract.WriteOptions{IdempotencyKey: key, Durability: contract.Sync}
			}
			first, err := e.b.Apply(e.ctx, op, sync(key))
			if err != nil || first.Value != 5 {
				e.t.Fatalf("first apply = %+v, %v", first, err)
			}
			firstB, err := e.b.ApplyBatch(e.ctx, batch, sync(bkey))
			if err != nil || len(firstB) != 2 || firstB[1].Value != 9 {
				e.t.Fatalf("first batch = %+v, %v", firstB, err)
			}
			b := e.s.LoseHotTier(e.t, id)
			e.s.Backend = b // the next cases' backend
			// Until the hot tier answers again, requests may be refused
			// (retryable); none may apply twice.
			retry := e.retryAfterLoss()
			var r contract.Result
			retry(func() (err error) { r, err = b.Apply(e.ctx, op, sync(key)); return err })
			if !r.Replayed || r.Value != first.Value || r.Version != first.Version || r.Kind != first.Kind {
				e.t.Errorf("retry = %+v; want the first result %+v, replayed", r, first)
			}
			var rb []contract.Result
			retry(func() (err error) { rb, err = b.ApplyBatch(e.ctx, batch, sync(bkey)); return err })
			if len(rb) != 2 || !rb[0].Replayed || rb[0].Value != 3 || rb[1].Value != 9 {
				e.t.Errorf("batch retry = %+v; want the first results %+v, replayed", rb, firstB)
			}
			for _, w := range []struct {
				id   string
				want int64
			}{{id, 9}, {bid, 3}} {
				var v contract.View
				retry(func() (err error) { v, err = b.Get(e.ctx, w.id); return err })
				if v.Value != w.want {
					e.t.Errorf("%q = %d after the retries, want %d (each request applied once)", w.id, v.Value, w.want)
				}
			}
		}},
		{"sync writes of a window over many buckets and a plain counter survive the hot tier's loss", func(e *env) {
			if e.s.LoseHotTier == nil {
				e.t.Skip("Setup.LoseHotTier unset: no way to make this backend lose its hot tier")
			}
			// Ten sync adds a second apart: the window's buckets are
			// written one after another (the embedded engine flushes a
			// window whole once, then the buckets changed since), and
			// after the loss every one of them must be read back.
			wid, pid := e.id("lost-window"), e.id("lost-plain")
			spec := counter.WindowSpec{Granularity: time.Second, Span: time.Minute}
			sync := contract.WriteOptions{Durability: contract.Sync}
			var want int64
			for i := int64(1); i <= 10; i++ {
				op := add(wid, contract.KindWindow, i)
				op.Window = spec
				if _, err := e.b.Apply(e.ctx, op, sync); err != nil {
					e.t.Fatalf("window add %d: %v", i, err)
				}
				if _, err := e.b.Apply(e.ctx, add(pid, contract.KindNone, i), sync); err != nil {
					e.t.Fatalf("plain add %d: %v", i, err)
				}
				want += i
				e.s.Clock.Advance(time.Second)
			}
			b := e.s.LoseHotTier(e.t, wid)
			e.s.Backend = b
			retry := e.retryAfterLoss()
			var v contract.View
			retry(func() (err error) { v, err = b.Get(e.ctx, wid); return err })
			var sum int64
			for _, bk := range v.Buckets {
				sum += bk.Count
			}
			switch {
			case e.caps.Mode == "tiered":
				// The tiered mode keeps window buckets in Redis only
				// (PostgreSQL has their minute series; docs/redis-tier.md):
				// the window is gone, not read back wrong.
				if v.Exists || v.Value != 0 {
					e.t.Errorf("tiered window after the loss = %+v, want none (its buckets lived in Redis only)", v)
				}
			case v.Kind != contract.KindWindow || v.Value != want || sum != want || v.Window != spec:
				e.t.Errorf("window after the loss = %s %d (buckets sum %d, %+v), want window %d over %+v", v.Kind, v.Value, sum, v.Window, want, spec)
			}
			retry(func() (err error) { v, err = b.Get(e.ctx, pid); return err })
			if v.Value != want {
				e.t.Errorf("plain counter after the loss = %d, want %d", v.Value, want)
			}
		}},
	}
}

// retryAfterLoss returns a function that calls f until it succeeds,
// retrying only ErrUnavailable (the hot tier not answering yet) for up to
// 20 s, and fails the test on any other error.
func (e *env) retryAfterLoss() func(f func() error) {
	deadline := time.Now().Add(20 * time.Second)
	return func(f func() error) {
		e.t.Helper()
		for {
			err := f()
			if err == nil {
				return
			}
			if !errors.Is(err, contract.ErrUnavailable) || time.Now().After(deadline) {
				e.t.Fatalf("retry after the loss: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
