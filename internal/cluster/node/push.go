package node

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The push loop sends CRDT deltas and async writes to their replicas as
// soon as they are made, like a group commit: a change wakes the loop,
// which pushes everything pending unless it pushed less than PushGap ago
// (then it waits out the gap, and whatever changed meanwhile goes in the
// same push). One push is in flight at a time. A push that failed for a
// peer leaves its changes pending, and they are retried every
// PushInterval rather than at every change, so an unreachable peer is not
// hammered. Convergence is thus one round trip on an idle node and at
// most PushGap plus a round trip under load, where it was up to
// PushInterval (100 ms) with a periodic push.

// dirtySet holds the changes not yet pushed, with the time each id first
// changed (for the lag and convergence metrics).
type dirtySet struct {
	mu   sync.Mutex           // guards ids
	ids  map[string]dirtyItem // by id
	kick chan struct{}        // a change was marked (capacity 1: wakes the push loop once)
}

type dirtyItem struct {
	since time.Time
	tomb  *State
}

func (d *dirtySet) init() {
	d.ids = map[string]dirtyItem{}
	d.kick = make(chan struct{}, 1)
}

func (d *dirtySet) mark(changes []change) {
	now := time.Now()
	d.mu.Lock()
	for _, c := range changes {
		it, ok := d.ids[c.id]
		if !ok {
			it.since = now
		}
		it.tomb = c.tomb
		d.ids[c.id] = it
	}
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default: // the loop is already woken
	}
}

// take empties the set and returns what it held.
func (d *dirtySet) take() map[string]dirtyItem {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.ids
	d.ids = map[string]dirtyItem{}
	return out
}

// putBack returns items whose push failed, unless the id changed again
// meanwhile (then the newer entry stays, with the older time).
func (d *dirtySet) putBack(items map[string]dirtyItem) {
	d.mu.Lock()
	for id, it := range items {
		if cur, ok := d.ids[id]; ok {
			cur.since = it.since
			d.ids[id] = cur
		} else {
			d.ids[id] = it
		}
	}
	d.mu.Unlock()
}

// oldest is the first-change time of the oldest pending id (zero if none).
func (d *dirtySet) oldest() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	var t time.Time
	for _, it := range d.ids {
		if t.IsZero() || it.since.Before(t) {
			t = it.since
		}
	}
	return t
}

// pushLoop runs flushDirty when a change is marked (at most once per
// PushGap) and every PushInterval, until Close. After a push that failed,
// changes wait for the next PushInterval tick.
func (n *Node) pushLoop() {
	t := time.NewTicker(n.cfg.PushInterval)
	defer t.Stop()
	var last time.Time // start of the last push
	failing := false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.dirty.kick:
			if failing {
				continue // retried at the next tick
			}
			if wait := n.cfg.PushGap - time.Since(last); wait > 0 {
				select {
				case <-n.ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		last = time.Now()
		err := n.flushDirty(n.ctx)
		failing = err != nil
		if err != nil {
			n.log.Debug("cluster: push", "err", err)
		}
	}
}

// flushDirty pushes every pending change to its replicas; failed pushes
// stay pending.
func (n *Node) flushDirty(ctx context.Context) error {
	items := n.dirty.take()
	defer n.updateLag()
	if len(items) == 0 {
		return nil
	}
	s := n.ring.Snapshot()
	var plan pushPlan
	if !n.alone(s) { // else no replica to push to: no export
		changes := make([]change, 0, len(items))
		for id, it := range items {
			changes = append(changes, change{id: id, tomb: it.tomb})
		}
		plan = n.planPush(s, n.exportChanges(changes))
	}
	failed := n.pushAll(ctx, plan.byPeer, false)
	retry := map[string]dirtyItem{}
	for peer := range failed {
		for _, st := range plan.byPeer[peer] {
			retry[st.ID] = items[st.ID]
		}
	}
	now := time.Now()
	for id, it := range items {
		if _, failed := retry[id]; !failed {
			n.metrics.convergence.Observe(now.Sub(it.since).Seconds())
		}
	}
	n.dirty.putBack(retry)
	if len(failed) > 0 {
		return fmt.Errorf("cluster: push to %d peers failed; retrying", len(failed))
	}
	return nil
}

func (n *Node) updateLag() {
	lag := 0.0
	if t := n.dirty.oldest(); !t.IsZero() {
		lag = time.Since(t).Seconds()
	}
	n.metrics.replicationLag.Set(lag)
}
