package node

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/httpjson"
)

// Status is the JSON of GET /cluster. Clients rebuild the ring with
// ring.New(ring.Config{VirtualNodes: VNodes, ReplicationFactor:
// ReplicationFactor}) and SetTags(the alive member ids, HashTags).
type Status struct {
	Self              string         `json:"self"`
	RingVersion       uint64         `json:"ring_version"`
	VNodes            int            `json:"vnodes"`
	ReplicationFactor int            `json:"replication_factor"`
	HashTags          bool           `json:"hash_tags"` // the ring places ids by their hash tag (ring.TagHash)
	Members           []MemberStatus `json:"members"`
	Forgotten         []string       `json:"forgotten,omitempty"` // retired node ids (forget.go)
}

// MemberStatus is one member in Status.
type MemberStatus struct {
	ID        string  `json:"id"`
	State     string  `json:"state"` // alive, dead, left
	Gossip    string  `json:"gossip"`
	HTTP      string  `json:"http"`
	RESP      string  `json:"resp"`
	GRPC      string  `json:"grpc"`
	Ownership float64 `json:"ownership"` // share of the ring, 0 unless alive and on the ring
}

// Status describes the cluster as this node sees it: members sorted by id,
// including dead and left ones.
func (n *Node) Status() Status {
	s := n.ring.Snapshot()
	cfg := n.ring.Config()
	st := Status{Self: n.self, RingVersion: s.Version(), VNodes: cfg.VirtualNodes, ReplicationFactor: cfg.ReplicationFactor, HashTags: s.Tags()}
	own := s.Ownership()
	share := func(id string) float64 { return math.Round(own[id]*1000) / 1000 }
	m := n.members.Load()
	if m == nil {
		meta := n.peers.get(n.self)
		st.Members = []MemberStatus{{ID: n.self, State: "alive", Gossip: n.cfg.Gossip, HTTP: meta.HTTP, RESP: meta.RESP, GRPC: meta.GRPC, Ownership: share(n.self)}}
		return st
	}
	st.Forgotten = m.Forgotten()
	for _, mem := range m.Members() { // sorted by id
		meta := parseMeta(mem.Meta)
		ms := MemberStatus{ID: mem.ID, State: mem.State.String(), Gossip: mem.Addr, HTTP: meta.HTTP, RESP: meta.RESP, GRPC: meta.GRPC}
		if mem.State == membership.StateAlive {
			ms.Ownership = share(mem.ID)
		}
		st.Members = append(st.Members, ms)
	}
	return st
}

// RingVersionHeader is set on /cluster answers.
const RingVersionHeader = "Counterd-Ring-Version"

// HTTPRoutes lists the routes Routes serves, as "METHOD pattern" (the
// access-control table must name each; HEAD is served with GET).
func HTTPRoutes() []string {
	return []string{"GET /cluster", "GET /cluster/{$}", "GET /cluster/metrics", "POST /cluster/forget"}
}

// Routes are the node's extra HTTP handlers by path prefix: GET /cluster
// (Status as JSON), GET /cluster/metrics (the node's metrics alone) and
// POST /cluster/forget (forget.go).
func (n *Node) Routes() map[string]http.Handler {
	var once sync.Once
	var mh http.Handler
	return map[string]http.Handler{"/cluster": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cluster", "/cluster/":
		case "/cluster/metrics":
			once.Do(func() { mh = n.metricsHandler() })
			mh.ServeHTTP(w, r)
			return
		case "/cluster/forget":
			n.serveForget(w, r)
			return
		default:
			httpjson.WriteError(w, fmt.Errorf("%w: no route for %s %s", httpjson.ErrRouteNotFound, r.Method, r.URL.Path))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, fmt.Errorf("%w: %s %s", httpjson.ErrMethodNotAllowed, r.Method, r.URL.Path))
			return
		}
		st := n.Status()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(RingVersionHeader, strconv.FormatUint(st.RingVersion, 10))
		_ = json.NewEncoder(w).Encode(st)
	})}
}
