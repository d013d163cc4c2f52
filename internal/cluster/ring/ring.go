// Package ring places counter ids on cluster nodes with consistent hashing.
//
// The ring is the 64-bit hash space [0, 2^64). Every node is placed on it
// VirtualNodes times, at xxhash64("node#i") for i in [0, VirtualNodes). A
// counter id hashes to xxhash64(id); its owner is the node of the first
// virtual node at or after that position, wrapping at 2^64. Its replicas are
// the owner followed by the next distinct nodes clockwise.
//
// A ring set to place by hash tag (SetTags) hashes an id holding a Redis
// Cluster hash tag (HashTag: the text between its first '{' and the next
// '}', when not empty) by that tag alone, so ids sharing a tag have the same
// owner and replicas; ids without a tag hash as above.
//
// A Ring is safe for concurrent use. Membership changes (Add, Remove) are
// serialised by a mutex and publish a new immutable Snapshot through an atomic
// pointer, so lookups (Owner, Replicas) take no lock and do not allocate
// (Owner) or allocate only the result (Replicas). Callers that need several
// lookups to agree with each other take one Snapshot and use it throughout.
//
// Placement depends only on the set of node names, never on the order in
// which they were added: equal hash positions are ordered by node name.
package ring

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultVirtualNodes is the number of ring positions per node. With 100,
	// the most loaded of 3..10 nodes holds at most ~1.2x the mean (see
	// docs/cluster.md for the measurement).
	DefaultVirtualNodes = 100
	// DefaultReplicationFactor is R, the number of nodes holding each id
	// (owner included) when Replicas is called with r <= 0. It is capped at
	// the number of nodes.
	DefaultReplicationFactor = 3
	// MaxVirtualNodes bounds VirtualNodes so a ring stays small
	// (nodes x VirtualNodes x 16 bytes).
	MaxVirtualNodes = 10000
)

// Config tunes a Ring. The zero value is valid and means the defaults.
type Config struct {
	// VirtualNodes is the number of positions each node takes on the ring.
	// More positions give a more even load and smoother rebalancing at the
	// cost of memory and a slightly longer lookup. Default 100; at most
	// MaxVirtualNodes. Every node of a cluster must use the same value.
	VirtualNodes int
	// ReplicationFactor is the default R for Replicas (owner included).
	// Default 3; the result is always capped at the number of nodes.
	ReplicationFactor int
}

// WithDefaults returns c with zero fields replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.VirtualNodes == 0 {
		c.VirtualNodes = DefaultVirtualNodes
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	return c
}

// Validate reports whether c (after defaults) is usable.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.VirtualNodes < 1 || c.VirtualNodes > MaxVirtualNodes {
		return fmt.Errorf("ring: VirtualNodes must be in [1, %d], got %d", MaxVirtualNodes, c.VirtualNodes)
	}
	if c.ReplicationFactor < 1 {
		return fmt.Errorf("ring: ReplicationFactor must be >= 1, got %d", c.ReplicationFactor)
	}
	return nil
}

// ErrEmptyNode is returned by Add for an empty node name.
var ErrEmptyNode = errors.New("ring: empty node name")

// Hash is the ring position of a counter id on a ring that does not place
// by hash tag (the whole id hashed).
func Hash(id string) uint64 { return xxhash.Sum64String(id) }

// HashTag returns id's hash tag as Redis Cluster finds it: the text between
// the first '{' and the first '}' after it, when that text is not empty.
// ok is false when id has no such tag (no '{', no '}' after it, or "{}"
// first), and then the whole id is hashed.
func HashTag(id string) (tag string, ok bool) {
	i := strings.IndexByte(id, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(id[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return id[i+1 : i+1+j], true
}

// TagHash is the ring position of id on a ring that places by hash tag:
// Hash of its tag when it has one, else Hash(id).
func TagHash(id string) uint64 {
	if tag, ok := HashTag(id); ok {
		return xxhash.Sum64String(tag)
	}
	return xxhash.Sum64String(id)
}

// VNodeHash is the ring position of virtual node i of node.
func VNodeHash(node string, i int) uint64 {
	var buf [64]byte
	b := append(buf[:0], node...)
	b = append(b, '#')
	b = strconv.AppendInt(b, int64(i), 10)
	return xxhash.Sum64(b)
}

type point struct {
	hash uint64
	node int32 // index into Snapshot.nodes
}

// Snapshot is an immutable view of the ring at one version. All its methods
// are safe for concurrent use.
type Snapshot struct {
	version uint64
	rf      int
	tags    bool     // ids are placed by hash tag (TagHash), else by Hash
	nodes   []string // sorted, distinct
	points  []point  // sorted by (hash, node name)
}

// Version is the ring version this snapshot was taken at. It starts at 0 for
// an empty ring and increases by one on every change.
func (s *Snapshot) Version() uint64 { return s.version }

// Tags reports whether this snapshot places ids by hash tag (TagHash).
func (s *Snapshot) Tags() bool { return s.tags }

// Pos is the ring position of id in this snapshot: TagHash(id) when it
// places by hash tag, else Hash(id).
func (s *Snapshot) Pos(id string) uint64 {
	if s.tags {
		return TagHash(id)
	}
	return Hash(id)
}

// Len is the number of nodes.
func (s *Snapshot) Len() int { return len(s.nodes) }

// Nodes returns the node names in sorted order (a copy).
func (s *Snapshot) Nodes() []string { return slices.Clone(s.nodes) }

// search returns the index of the first point with hash >= h, wrapping to 0.
// The ring must not be empty.
func (s *Snapshot) search(h uint64) int {
	lo, hi := 0, len(s.points)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.points[m].hash < h {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.points) {
		return 0
	}
	return lo
}

// Owner returns the node owning id, or "" if the ring is empty.
func (s *Snapshot) Owner(id string) string { return s.OwnerOfHash(s.Pos(id)) }

// OwnerOfHash returns the node owning ring position h, or "" if the ring is
// empty.
func (s *Snapshot) OwnerOfHash(h uint64) string {
	if len(s.points) == 0 {
		return ""
	}
	return s.nodes[s.points[s.search(h)].node]
}

// Replicas returns the r nodes holding id: the owner first, then the next
// distinct nodes clockwise. r <= 0 means the configured ReplicationFactor;
// the result has min(r, Len()) entries (nil for an empty ring).
func (s *Snapshot) Replicas(id string, r int) []string {
	return s.AppendReplicas(nil, id, r)
}

// AppendReplicas is Replicas appending to dst, for callers that reuse a
// buffer (no allocation when cap(dst) suffices).
func (s *Snapshot) AppendReplicas(dst []string, id string, r int) []string {
	if r <= 0 {
		r = s.rf
	}
	r = min(r, len(s.nodes))
	if r == 0 {
		return dst
	}
	start := len(dst)
	i := s.search(s.Pos(id))
	for n := 0; n < len(s.points) && len(dst)-start < r; n++ {
		node := s.nodes[s.points[i].node]
		if !slices.Contains(dst[start:], node) {
			dst = append(dst, node)
		}
		if i++; i == len(s.points) {
			i = 0
		}
	}
	return dst
}

func build(version uint64, rf, vnodes int, nodes []string, tags bool) *Snapshot {
	s := &Snapshot{version: version, rf: rf, nodes: nodes, tags: tags}
	s.points = make([]point, 0, len(nodes)*vnodes)
	for ni, n := range nodes {
		for v := 0; v < vnodes; v++ {
			s.points = append(s.points, point{hash: VNodeHash(n, v), node: int32(ni)})
		}
	}
	// nodes is sorted, so ordering ties by node index orders them by name:
	// placement is independent of insertion order.
	slices.SortFunc(s.points, func(a, b point) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		return int(a.node) - int(b.node)
	})
	return s
}

// Ring is a consistent-hash ring of node names. The zero value is not usable;
// call New.
type Ring struct {
	cfg  Config
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[Snapshot]
}

// New returns an empty ring. It panics if cfg is invalid (check
// cfg.Validate first when the values come from users).
func New(cfg Config) *Ring {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	r := &Ring{cfg: cfg.WithDefaults()}
	r.snap.Store(build(0, r.cfg.ReplicationFactor, r.cfg.VirtualNodes, nil, false))
	return r
}

// Config returns the ring's configuration with defaults applied.
func (r *Ring) Config() Config { return r.cfg }

// Snapshot returns the current immutable view.
func (r *Ring) Snapshot() *Snapshot { return r.snap.Load() }

// Add puts node on the ring. It reports whether the ring changed (false if
// node was already there). It panics on an empty name.
func (r *Ring) Add(node string) bool {
	if node == "" {
		panic(ErrEmptyNode)
	}
	return r.update(nil, func(nodes []string) ([]string, bool) {
		i, ok := slices.BinarySearch(nodes, node)
		if ok {
			return nodes, false
		}
		return slices.Insert(slices.Clone(nodes), i, node), true
	})
}

// Remove takes node off the ring. It reports whether the ring changed.
func (r *Ring) Remove(node string) bool {
	return r.update(nil, func(nodes []string) ([]string, bool) {
		i, ok := slices.BinarySearch(nodes, node)
		if !ok {
			return nodes, false
		}
		return slices.Delete(slices.Clone(nodes), i, i+1), true
	})
}

// Set replaces the node set (for example with the alive members reported by
// membership). Duplicates and empty names are ignored. It reports whether the
// ring changed; Version increases by one per call that changes it. The
// placement (by hash tag or not) stays as it is.
func (r *Ring) Set(nodes []string) bool { return r.set(nodes, nil) }

// SetTags is Set also choosing the placement: by hash tag (TagHash) when
// tags is true, by the whole id (Hash) otherwise. A change of placement
// alone is a change of the ring (a new Version).
func (r *Ring) SetTags(nodes []string, tags bool) bool { return r.set(nodes, &tags) }

func (r *Ring) set(nodes []string, tags *bool) bool {
	next := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n != "" {
			next = append(next, n)
		}
	}
	slices.Sort(next)
	next = slices.Compact(next)
	return r.update(tags, func(cur []string) ([]string, bool) {
		if slices.Equal(cur, next) {
			return cur, false
		}
		return next, true
	})
}

// update applies f to the node set and, when tags is not nil, sets the
// placement to *tags.
func (r *Ring) update(tags *bool, f func([]string) ([]string, bool)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	next, changed := f(cur.nodes)
	t := cur.tags
	if tags != nil && *tags != t {
		t, changed = *tags, true
	}
	if !changed {
		return false
	}
	r.snap.Store(build(cur.version+1, r.cfg.ReplicationFactor, r.cfg.VirtualNodes, next, t))
	return true
}

// Nodes returns the node names in sorted order.
func (r *Ring) Nodes() []string { return r.Snapshot().Nodes() }

// Owner returns the node owning id, or "" if the ring is empty.
func (r *Ring) Owner(id string) string { return r.Snapshot().Owner(id) }

// Replicas returns the owner of id followed by the next distinct nodes
// clockwise; see Snapshot.Replicas.
func (r *Ring) Replicas(id string, n int) []string { return r.Snapshot().Replicas(id, n) }

// Version increases by one on every change of the node set or placement.
func (r *Ring) Version() uint64 { return r.Snapshot().Version() }

// String describes the ring for logs.
func (s *Snapshot) String() string {
	tags := ""
	if s.tags {
		tags = ", by hash tag"
	}
	return fmt.Sprintf("ring v%d [%s] (%d points%s)", s.version, strings.Join(s.nodes, ","), len(s.points), tags)
}

// Ownership returns the share of the hash space each node owns, in [0, 1]
// (the fraction of ids it is expected to own); empty for an empty ring.
func (s *Snapshot) Ownership() map[string]float64 {
	out := make(map[string]float64, len(s.nodes))
	if len(s.points) == 0 {
		return out
	}
	const space = float64(1<<63) * 2
	prev := s.points[len(s.points)-1].hash
	for _, p := range s.points {
		// The arc (prev, p.hash] belongs to p's node; uint64 subtraction
		// wraps for the first arc.
		out[s.nodes[p.node]] += float64(p.hash-prev) / space
		prev = p.hash
	}
	if len(s.nodes) == 1 {
		out[s.nodes[0]] = 1 // a single node's arcs sum to 2^64, which wraps to 0
	}
	return out
}
