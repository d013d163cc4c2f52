package node

import (
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
)

// Peer traffic is gRPC with protobuf messages generated from
// api/counterd/cluster/v1/peer.proto. The node works with the structs
// below; wire.go converts them to and from the generated messages. Every
// request carries the sender's id; forwarded requests carry the hop flag
// and ring version.

// serviceName is the Peer service of peer.proto.
const serviceName = "counterd.cluster.v1.Peer"

// header is the common part of every peer request.
type header struct {
	From        string `json:"from"`
	RingVersion uint64 `json:"ring_version"`
	// Hop is set on forwarded client requests: the receiver must not forward
	// again and answers ErrWrongOwner instead.
	Hop bool `json:"hop"`
}

type applyRequest struct {
	header
	Ops        []contract.Op       `json:"ops"`
	Batch      bool                `json:"batch"`
	Durability contract.Durability `json:"durability"`
	IdemKey    string              `json:"idem_key,omitempty"`
}

type wireResult struct {
	contract.Result
	Replayed bool `json:"replayed,omitempty"`
}

type applyResponse struct {
	Results []wireResult `json:"results"`
	Err     *wireError   `json:"err,omitempty"`
}

// readRequest is one owner read; Op selects which.
type readRequest struct {
	header
	Op    string             `json:"op"` // get, hget, pfcount, ttl, series, uniques
	ID    string             `json:"id"`
	IDs   []string           `json:"ids,omitempty"`
	Field string             `json:"field,omitempty"`
	G     rollup.Granularity `json:"g,omitempty"`
	From  time.Time          `json:"from"`
	To    time.Time          `json:"to"`
	N     int                `json:"n,omitempty"`
	// AnyReplica asks a replica to answer from its copy, without the
	// owner's check and fence (the owner is unreachable).
	AnyReplica bool `json:"any_replica,omitempty"`
}

type readResponse struct {
	View     *contract.View   `json:"view,omitempty"`
	Int      int64            `json:"int,omitempty"`
	Uint     uint64           `json:"uint,omitempty"`
	Float    float64          `json:"float,omitempty"`
	OK       bool             `json:"ok,omitempty"`
	Exists   bool             `json:"exists,omitempty"`
	Duration time.Duration    `json:"duration,omitempty"`
	Series   *wireSeries      `json:"series,omitempty"`
	Estimate *rollup.Estimate `json:"estimate,omitempty"`
	Err      *wireError       `json:"err,omitempty"`
	Kind     contract.Kind    `json:"kind,omitempty"` // op "series": the id's kind on the answering node
}

// wireSeries is rollup.Series without its unexported bucket origin, which
// is recomputed from From on the receiving side.
type wireSeries struct {
	Granularity rollup.Granularity `json:"g"`
	Source      rollup.Granularity `json:"source"`
	From, To    time.Time
	Values      []int64 `json:"values"`
	Total       int64   `json:"total"`
}

// localRequest asks a node for its part of a cluster-wide operation.
type localRequest struct {
	header
	Op         string              `json:"op"` // aggregate, scan, len, view, flushall, setrollup, deleterollup, series, handed_off
	Prefix     string              `json:"prefix,omitempty"`
	Cursor     uint64              `json:"cursor,omitempty"`
	Match      string              `json:"match,omitempty"`
	Count      int                 `json:"count,omitempty"`
	Key        string              `json:"key,omitempty"`
	Spec       rollup.Spec         `json:"spec"`
	Durability contract.Durability `json:"durability,omitempty"`
	View       *viewRequest        `json:"view,omitempty"`      // read view (readview.go)
	SeriesOf   *seriesQuery        `json:"series_of,omitempty"` // op "series" (series.go)
	Mark       *handoffMark        `json:"mark,omitempty"`      // op "handed_off" (readview.go)
}

type localResponse struct {
	Aggregate contract.Aggregate `json:"aggregate"`
	IDs       []string           `json:"ids,omitempty"`
	Next      uint64             `json:"next,omitempty"`
	N         int                `json:"n,omitempty"`
	OK        bool               `json:"ok,omitempty"`
	Err       *wireError         `json:"err,omitempty"`
	View      *viewAnswer        `json:"view,omitempty"`   // read view (readview.go)
	Series    *wireSeries        `json:"series,omitempty"` // op "series" (series.go)
	Mark      *handoffMark       `json:"mark,omitempty"`   // op "handed_off": the responder's own (readview.go)
}

// replicateRequest pushes states to a replica (owner replication, CRDT
// deltas, handoff). Sync asks for a durable merge before the answer.
type replicateRequest struct {
	header
	States []State      `json:"states"`
	Sync   bool         `json:"sync"`
	Idem   []idemRecord `json:"idem,omitempty"`  // results of keyed mutations (idem.go)
	Marks  []markGroup  `json:"marks,omitempty"` // dedupe marks of the ids (marks.go)
}

type replicateResponse struct {
	Changed int `json:"changed"`
	// Stale lists the ids whose state was written in an ownership epoch
	// below the one this replica promised (epoch.go): merged like any
	// state, but not an acknowledgement of the write.
	Stale []string   `json:"stale,omitempty"`
	Err   *wireError `json:"err,omitempty"`
}

// fetchRequest pulls states (takeover fence, anti-entropy).
type fetchRequest struct {
	header
	IDs []string `json:"ids"`
	// Claims, when set, has one ownership epoch per id that the sender
	// claims as the id's new owner (0: no claim for that id); see epoch.go.
	Claims []uint32 `json:"claims,omitempty"`
	// IdemKey, when set, asks only for the record of IdemKey and IdemFP
	// among the ids' records, without states (lookupRecord, idem.go).
	IdemKey string `json:"idem_key,omitempty"`
	IdemFP  uint64 `json:"idem_fp,omitempty"`
}

type fetchResponse struct {
	States []State `json:"states"`
	// Nodes is the hash of the responder's ring node set: a fence only
	// counts answers from peers that agree on the ring.
	Nodes uint64       `json:"nodes"`
	Idem  []idemRecord `json:"idem,omitempty"` // records of keyed mutations of the ids
	// Refused has one entry per id when the request had Claims: 0 when
	// the claim was accepted (or none was made), else the epoch promised
	// to another claimant, which a new claim must exceed.
	Refused []uint32    `json:"refused,omitempty"`
	Err     *wireError  `json:"err,omitempty"`
	Marks   []markGroup `json:"marks,omitempty"` // every dedupe mark of the ids (marks.go)
}

// digestRequest is one anti-entropy round: the sender's digest of the ids
// it shares with the receiver.
type digestRequest struct {
	header
	Items []digestItem `json:"items"`
}

type digestItem struct {
	ID      string `json:"id"`
	Version uint64 `json:"v"`
	Sum     uint64 `json:"sum"`
}

type digestResponse struct {
	Want   []string     `json:"want,omitempty"`   // ids the receiver lacks or holds differently
	States []State      `json:"states,omitempty"` // the receiver's states for differing ids
	Idem   []idemRecord `json:"idem,omitempty"`   // recent idempotency records of those ids
	Err    *wireError   `json:"err,omitempty"`
	Marks  []markGroup  `json:"marks,omitempty"` // dedupe marks of those ids
}
