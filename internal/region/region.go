// Package region names the region a counterd cluster runs in and the other
// regions it knows (issue #15, multi-region). A region is an ordinary
// cluster; --region names it and --peer-regions lists the gRPC addresses of
// the other regions' gateways.
//
// The region is recorded in the data directory on first start (a later
// start under another region is refused, so one region's state never
// silently becomes another's). A Replicator (replicator.go) ships this
// region's changes to every peer region every interval over the region
// gRPC service (service.go), resuming from the position each peer
// acknowledged (on a node of a cluster region: the counters it owns, each
// node to every gateway of every peer region); keeps a copy of every peer's state, each in its own engine
// (the region-qualified namespace: global = local + the sum of the
// copies, global.go); and repairs and bootstraps copies by chunked,
// hash-addressed sync (internal/chunksync). GET /regions reports each
// link.
package region

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/counterd/counterd/internal/httpjson"
)

var (
	// ErrInvalid: a region name or a --peer-regions list is malformed.
	ErrInvalid = errors.New("region: invalid")
	// ErrChanged: the data directory was recorded under another region.
	ErrChanged = errors.New("region: data directory belongs to another region")
)

// MaxNameLen is the longest region name.
const MaxNameLen = 64

// ValidateName reports whether name is a region name: 1..64 ASCII letters,
// digits, '_', '-' or '.' (such as DC_EUROPE_0 or us-east-1).
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: region name %q must have 1 to %d characters", ErrInvalid, name, MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: region name %q: byte %d is not a letter, digit, '_', '-' or '.'", ErrInvalid, name, i)
		}
	}
	return nil
}

// Peer is another region and the gRPC address of its gateway.
type Peer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// ParsePeers parses a --peer-regions list, "NAME=HOST:PORT,...", of regions
// other than self. A name listed several times names several gateways of
// one region (the nodes of a cluster region: each gets its own pushes and
// keeps its own copies); an address may not repeat. An empty list is
// none.
func ParsePeers(list, self string) ([]Peer, error) {
	var peers []Peer
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("%w: peer region %q is not NAME=HOST:PORT", ErrInvalid, item)
		}
		if err := ValidateName(name); err != nil {
			return nil, err
		}
		if name == self {
			return nil, fmt.Errorf("%w: peer region %q is this region", ErrInvalid, name)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%w: peer region %q: address %q is not HOST:PORT", ErrInvalid, name, addr)
		}
		if seen[addr] {
			return nil, fmt.Errorf("%w: peer region %q: address %s listed twice", ErrInvalid, name, addr)
		}
		seen[addr] = true
		peers = append(peers, Peer{Name: name, Addr: addr})
	}
	return peers, nil
}

// MetaStore is where Record keeps the region: the engine's metadata.
type MetaStore interface {
	Meta(prefix string) (map[string][]byte, error)
	PutMeta(kv map[string][]byte) error
}

const metaKey = "region/name"

// Record checks name against the region recorded in m and records it on
// first use. A data directory recorded under one region refuses another
// name, and refuses to start without one; one without a record takes
// name. An empty name with no record records nothing.
func Record(m MetaStore, name string) error {
	kv, err := m.Meta(metaKey)
	if err != nil {
		return err
	}
	if old, ok := kv[metaKey]; ok {
		if string(old) != name {
			return fmt.Errorf("%w: it was recorded under --region %q, not %q", ErrChanged, old, name)
		}
		return nil
	}
	if name == "" {
		return nil
	}
	return m.PutMeta(map[string][]byte{metaKey: []byte(name)})
}

// Status is the JSON of GET /regions.
type Status struct {
	Region string `json:"region"` // "" without --region
	Node   string `json:"node"`
	// IntervalMS is the replication period (0 without peers).
	IntervalMS int64        `json:"interval_ms"`
	Peers      []PeerStatus `json:"peers"`
}

// PeerStatus is one peer region's link.
type PeerStatus struct {
	Peer
	// Sending: Pending ids changed here that the peer has not
	// acknowledged; LagSeconds is the age of the oldest of them (0: none).
	Pending     int     `json:"pending"`
	LagSeconds  float64 `json:"lag_seconds"`
	LastContact *string `json:"last_contact"` // last push either way (RFC 3339)
	LastPush    *string `json:"last_push"`    // last push the peer acknowledged
	LastError   string  `json:"last_error,omitempty"`
	Pushes      uint64  `json:"pushes"`
	PushErrors  uint64  `json:"push_errors"`
	BytesSent   uint64  `json:"bytes_sent"`
	StatesSent  uint64  `json:"states_sent"`
	// Receiving: the as-of of the peer's last complete push (what global
	// reads report for it: the oldest of its sending nodes') and what it
	// sent.
	AsOf *string `json:"as_of"`
	// Senders are the peer's nodes that push here (a cluster region's
	// each ship the counters they own), by node id.
	Senders       []SenderStatus `json:"senders,omitempty"`
	BytesReceived uint64         `json:"bytes_received"`
	// Anti-entropy: pulls of the peer's state into the local copy.
	Syncs          uint64  `json:"syncs"`
	LastSync       *string `json:"last_sync"`
	ChunksCompared uint64  `json:"chunks_compared"`
	ChunksFetched  uint64  `json:"chunks_fetched"`
	SyncBytes      uint64  `json:"sync_bytes"`
	SyncFullBytes  uint64  `json:"sync_full_bytes"` // what full copies would have moved
}

// SenderStatus is one node of a peer region that pushes here.
type SenderStatus struct {
	Node      string  `json:"node"`
	AsOf      *string `json:"as_of"` // its last complete push's; null before one
	LastHeard *string `json:"last_heard"`
}

// Handler serves GET /regions with the status st returns. Other paths
// under /regions are 404 and other methods 405, as the HTTP API's errors.
func Handler(st func() Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/regions":
			httpjson.WriteError(w, fmt.Errorf("%w: no route for %s %s", httpjson.ErrRouteNotFound, r.Method, r.URL.Path))
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			httpjson.WriteError(w, fmt.Errorf("%w: GET /regions only", httpjson.ErrMethodNotAllowed))
		default:
			s := st()
			if s.Peers == nil {
				s.Peers = []PeerStatus{}
			}
			body, _ := json.Marshal(s)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(append(body, '\n'))
		}
	})
}
