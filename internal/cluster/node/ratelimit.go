package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/ratelimit"
)

// Rate-limit state in the cluster. Checks are decided on the key's owner
// (ratelimit.Router with KeyOwner); what this file adds is that the
// owner's limiter state follows the key when the ring changes, and that
// policies are the same on every node.
//
// Handoff: on every ring change, and twice during Drain (before this node
// leaves its ring and after), the entries of keys whose owner changed and
// that this node does not own are sent to their owner in the new ring
// (Limits), which merges them so that a limit only gets stricter
// (ratelimit.ImportEntries). docs/ratelimit.md states the overshoot bounds.
//
// Replication: every LimitReplication (1 s) the entries charged since the
// last round on keys this node owns go to each key's next replica, which
// becomes the owner if this node dies, so a crash loses at most the
// admissions of one round; entries charged here for keys another node
// owns go to that owner.
//
// Policies: a ratelimit.PolicyLog on every node; a local write is pushed
// at once to every peer (Policies), and every anti-entropy round and ring
// change exchanges the whole log with the peers, so a node that was down
// or has just joined catches up.

// RateLimit is the rate-limit state a node keeps in step with the cluster.
// Either field may be nil.
type RateLimit struct {
	// Limiter decides the keys this node owns; it must keep keys
	// (ratelimit.Config.KeepKeys) for its state to move with the ring.
	Limiter *ratelimit.Limiter
	// Policies is this node's replica of the cluster's policies.
	Policies *ratelimit.PolicyLog
	// Global decides global-approx limits from this node's shares; the
	// node runs its exchange every Global.Interval() over the peer RPC
	// (GlobalLimits) and serves the ledgers of the keys it owns. Create it
	// with GlobalPeers() as its Peers.
	Global *ratelimit.Global
}

// GlobalPeers is how a ratelimit.Global on this node reaches the owners
// of its keys: the ring's owner, over the GlobalLimits peer call.
func (n *Node) GlobalPeers() ratelimit.GlobalPeers { return globalPeers{n} }

type globalPeers struct{ n *Node }

func (p globalPeers) Owner(key string) (bool, string) {
	id := p.n.ring.Snapshot().Owner(key)
	if id == "" || id == p.n.self {
		return true, ""
	}
	return false, id
}

func (p globalPeers) Nodes() int { return max(p.n.ring.Snapshot().Len(), 1) }

func (p globalPeers) Exchange(ctx context.Context, peer string, reps []ratelimit.GlobalReport) ([]ratelimit.GlobalShare, error) {
	var resp globalResponse
	if err := p.n.call(ctx, peer, "GlobalLimits", &globalRequest{header: p.n.header(false), Reports: reps}, &resp); err != nil {
		return nil, err
	}
	if err := resp.Err.err(peer, nil); err != nil {
		return nil, err
	}
	return resp.Shares, nil
}

type globalRequest struct {
	header
	Reports []ratelimit.GlobalReport
}

type globalResponse struct {
	Shares []ratelimit.GlobalShare
	Err    *wireError
}

func (n *Node) serveGlobal(_ context.Context, req *globalRequest) *globalResponse {
	if n.rl.Global == nil {
		return &globalResponse{Err: toWire(errNoLimiter)}
	}
	shares, err := n.rl.Global.Serve(req.From, req.Reports)
	return &globalResponse{Shares: shares, Err: toWire(err)}
}

// SetRateLimit attaches the rate-limit state. Call it before Start.
func (n *Node) SetRateLimit(rl RateLimit) {
	n.rl = rl
	if rl.Policies != nil {
		rl.Policies.SetPublish(n.publishPolicies)
	}
}

// entryChunks splits entries into Limits calls of about maxBytesPerCall
// of JSON: ~150 bytes per entry plus ~25 per sliding_log hit (a log holds
// up to 65536, 1.6 MiB: alone in its call, still below gRPC's 4 MiB).
func entryChunks(ents []ratelimit.Entry) [][]ratelimit.Entry {
	return sizedChunks(ents, maxBytesPerCall, func(e *ratelimit.Entry) int { return 150 + 25*len(e.Log) })
}

type limitsRequest struct {
	header
	Entries []ratelimit.Entry `json:"entries"`
	// Handoff: the receiver owns the keys now and replicates them in turn;
	// otherwise they are a copy (replication) not to be sent on.
	Handoff bool `json:"handoff,omitempty"`
}

type limitsResponse struct {
	Merged int        `json:"merged"`
	Err    *wireError `json:"err,omitempty"`
}

type policiesRequest struct {
	header
	Records []ratelimit.PolicyRecord `json:"records"`
}

type policiesResponse struct {
	Records []ratelimit.PolicyRecord `json:"records,omitempty"` // the receiver's whole log
	Err     *wireError               `json:"err,omitempty"`
}

func (n *Node) serveLimits(_ context.Context, req *limitsRequest) *limitsResponse {
	if n.rl.Limiter == nil {
		return &limitsResponse{Err: toWire(errNoLimiter)}
	}
	merged, err := n.rl.Limiter.ImportEntries(req.Entries, req.Handoff)
	return &limitsResponse{Merged: merged, Err: toWire(err)}
}

var errNoLimiter = errors.New("cluster: this node keeps no rate-limit state")

// replicateLimits sends the entries charged since the last round: those
// of keys this node owns to each key's next replica, the others (decided
// here by a stale ring, a forwarded check or a fallback) to the key's
// owner. A failed send is not retried: the entry goes again, whole, with
// its next charge.
func (n *Node) replicateLimits(ctx context.Context) error {
	s := n.ring.Snapshot()
	if s.Len() < 2 {
		n.rl.Limiter.ExportChanged(nil) // clear the marks: nobody to send to
		return nil
	}
	toReplica, toOwner := map[string][]ratelimit.Entry{}, map[string][]ratelimit.Entry{}
	var reps []string
	for _, e := range n.rl.Limiter.ExportChanged(nil) {
		reps = s.AppendReplicas(reps[:0], e.Key, 2)
		if reps[0] == n.self {
			toReplica[reps[1]] = append(toReplica[reps[1]], e)
		} else {
			toOwner[reps[0]] = append(toOwner[reps[0]], e)
		}
	}
	// The owner passes what it gets on to its replica; a replica keeps its
	// copy (else it would go back and forth).
	return errors.Join(n.sendLimits(ctx, toReplica, false), n.sendLimits(ctx, toOwner, true))
}

// handOffLimits sends the limiter state of the keys whose owner changed
// between old and cur, and that this node does not own in cur, to their
// owner in cur.
func (n *Node) handOffLimits(ctx context.Context, old, cur *ring.Snapshot) error {
	lim := n.rl.Limiter
	if lim == nil || cur.Len() == 0 {
		return nil
	}
	byPeer := map[string][]ratelimit.Entry{}
	for _, e := range lim.ExportEntries(func(key string) bool {
		o := cur.Owner(key)
		return o != n.self && o != old.Owner(key)
	}) {
		o := cur.Owner(e.Key)
		byPeer[o] = append(byPeer[o], e)
	}
	if len(byPeer) == 0 {
		return nil
	}
	start := time.Now()
	err := n.sendLimits(ctx, byPeer, true)
	n.log.Info("cluster rate-limit handoff", "ring", cur.Version(), "peers", len(byPeer),
		"err", err, "took", time.Since(start).Round(time.Millisecond))
	return err
}

// sendLimits sends entries to peers (Limits) in parallel, as a handoff or
// as copies, and counts what was acknowledged in the handoff metric.
func (n *Node) sendLimits(ctx context.Context, byPeer map[string][]ratelimit.Entry, handoff bool) error {
	label := "limits_replicated"
	if handoff {
		label = "limits_sent"
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	sent := 0
	for peer, ents := range byPeer {
		wg.Go(func() {
			for _, chunk := range entryChunks(ents) {
				var resp limitsResponse
				err := n.call(ctx, peer, "Limits", &limitsRequest{header: n.header(false), Entries: chunk, Handoff: handoff}, &resp)
				if err == nil {
					err = resp.Err.err(peer, nil)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					sent += len(chunk)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	n.metrics.handoff.WithLabelValues(label).Add(float64(sent))
	return errors.Join(errs...)
}

// publishTimeout bounds the push of a policy write: a peer that does not
// answer (dead, not yet declared so) delays the write that long at most.
const publishTimeout = time.Second

// publishPolicies pushes records this node wrote to every peer at once;
// peers that miss them catch up at the next policy exchange.
func (n *Node) publishPolicies(recs []ratelimit.PolicyRecord) {
	ctx, cancel := context.WithTimeout(n.ctx, min(publishTimeout, n.cfg.RPCTimeout))
	defer cancel()
	n.eachPeerPolicies(ctx, recs, func(p string, _ []ratelimit.PolicyRecord, err error) {
		if err != nil {
			n.log.Warn("cluster: policy push failed; the next exchange repairs it", "to", p, "err", err)
		}
	})
}

// exchangePolicies sends this node's whole policy log to every peer and
// merges theirs, within publishTimeout: it runs in the handoff and
// anti-entropy loops, which a slow peer must not hold up.
func (n *Node) exchangePolicies(ctx context.Context) error {
	pl := n.rl.Policies
	if pl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	n.eachPeerPolicies(ctx, pl.Records(), func(_ string, theirs []ratelimit.PolicyRecord, err error) {
		if err == nil {
			_, err = pl.Merge(theirs)
		}
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return errors.Join(errs...)
}

// eachPeerPolicies sends recs to every peer at once and calls done (from
// the peer's goroutine) with the peer's answer: its own records, or the
// error of the call. It returns when every peer has answered or failed.
func (n *Node) eachPeerPolicies(ctx context.Context, recs []ratelimit.PolicyRecord, done func(peer string, theirs []ratelimit.PolicyRecord, err error)) {
	var wg sync.WaitGroup
	for _, p := range n.ring.Snapshot().Nodes() {
		if p == n.self {
			continue
		}
		wg.Go(func() {
			var resp policiesResponse
			err := n.call(ctx, p, "Policies", &policiesRequest{header: n.header(false), Records: recs}, &resp)
			if err == nil {
				err = resp.Err.err(p, nil)
			}
			done(p, resp.Records, err)
		})
	}
	wg.Wait()
}

func (n *Node) servePolicies(_ context.Context, req *policiesRequest) *policiesResponse {
	pl := n.rl.Policies
	if pl == nil {
		return &policiesResponse{}
	}
	if _, err := pl.Merge(req.Records); err != nil {
		return &policiesResponse{Err: toWire(err)}
	}
	return &policiesResponse{Records: pl.Records()}
}

// policyPrefix is where EnginePolicies keeps policy records in the
// engine's metadata.
const policyPrefix = "ratelimit/policy/"

// EnginePolicies stores a PolicyLog's records in e's Pebble (synced
// metadata records), for the cluster and the embedded mode.
func EnginePolicies(e *engine.Engine) ratelimit.PolicyPersister { return enginePolicies{e} }

type enginePolicies struct{ e *engine.Engine }

func (p enginePolicies) LoadPolicyRecords() ([][]byte, error) {
	m, err := p.e.Meta(policyPrefix)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out, nil
}

func (p enginePolicies) StorePolicyRecords(recs map[string][]byte) error {
	kv := make(map[string][]byte, len(recs))
	for name, v := range recs {
		kv[policyPrefix+name] = v
	}
	return p.e.PutMeta(kv)
}
