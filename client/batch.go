package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Batch op types.
const (
	OpIncrement = "increment"
	OpDecrement = "decrement"
	OpSet       = "set"
	OpDelete    = "delete"
	OpExpire    = "expire"
	OpPFAdd     = "pfadd"
	OpPFMerge   = "pfmerge"
	OpHIncr     = "hincr"
	OpHDel      = "hdel"
)

// Op is one mutation of a Batch. Build it with IncrOp, SetOp and the other
// constructors, or fill in the fields Type uses.
type Op struct {
	Type string // OpIncrement, OpSet, ...
	ID   string

	Delta           int64            // OpIncrement, OpDecrement
	Kind            Kind             // OpIncrement, OpDecrement: as WithKind
	Value           int64            // OpSet
	ExpectedVersion *uint64          // OpSet: as WithExpectedVersion
	TTL             time.Duration    // OpSet: as WithTTL; OpExpire: the TTL, 0 removes it
	Items           []string         // OpPFAdd
	Sources         []string         // OpPFMerge
	Fields          map[string]int64 // OpHIncr
	Field           string           // OpHDel
}

// IncrOp adds delta to id.
func IncrOp(id string, delta int64) Op { return Op{Type: OpIncrement, ID: id, Delta: delta} }

// DecrOp subtracts delta from id.
func DecrOp(id string, delta int64) Op { return Op{Type: OpDecrement, ID: id, Delta: delta} }

// SetOp sets id to value.
func SetOp(id string, value int64) Op { return Op{Type: OpSet, ID: id, Value: value} }

// DeleteOp deletes id.
func DeleteOp(id string) Op { return Op{Type: OpDelete, ID: id} }

// ExpireOp sets the TTL of id; 0 removes it.
func ExpireOp(id string, ttl time.Duration) Op { return Op{Type: OpExpire, ID: id, TTL: ttl} }

// PFAddOp adds items to the HyperLogLog id.
func PFAddOp(id string, items ...string) Op { return Op{Type: OpPFAdd, ID: id, Items: items} }

// PFMergeOp merges srcs into the HyperLogLog dst.
func PFMergeOp(dst string, srcs ...string) Op { return Op{Type: OpPFMerge, ID: dst, Sources: srcs} }

// HIncrOp adds deltas to fields of the hash id.
func HIncrOp(id string, fields map[string]int64) Op { return Op{Type: OpHIncr, ID: id, Fields: fields} }

// HDelOp deletes one field of the hash id.
func HDelOp(id, field string) Op { return Op{Type: OpHDel, ID: id, Field: field} }

// MarshalJSON encodes op as the batch endpoint expects: the fields of the
// matching single route, plus "op" and "id".
func (op Op) MarshalJSON() ([]byte, error) {
	m := map[string]any{"op": op.Type, "id": op.ID}
	switch op.Type {
	case OpIncrement, OpDecrement:
		m["delta"] = op.Delta
		if op.Kind != "" {
			m["kind"] = op.Kind
		}
	case OpSet:
		m["value"] = op.Value
		if op.ExpectedVersion != nil {
			m["expected_version"] = *op.ExpectedVersion
		}
		if op.TTL > 0 {
			m["ttl_ms"] = ttlMillis(op.TTL)
		}
	case OpDelete:
	case OpExpire:
		m["ttl_ms"] = ttlMillis(op.TTL)
	case OpPFAdd:
		m["items"] = nonNil(op.Items)
	case OpPFMerge:
		m["sources"] = nonNil(op.Sources)
	case OpHIncr:
		m["fields"] = op.Fields
	case OpHDel:
		m["field"] = op.Field
	default:
		return nil, fmt.Errorf("client: unknown batch op type %q", op.Type)
	}
	return json.Marshal(m)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Batch applies ops atomically: all of them or, if one fails, none. The
// error of a failed batch is an *Error whose Index is the failing op's. The
// results are in the order of ops; an OpDelete, OpExpire or OpHDel result
// reports in Changed whether it changed anything.
func (c *Client) Batch(ctx context.Context, ops []Op, opts ...CallOption) ([]Result, error) {
	if len(ops) == 0 {
		return []Result{}, nil
	}
	for i, op := range ops {
		if err := checkID(op.ID); err != nil {
			return nil, fmt.Errorf("batch op %d: %w", i, err)
		}
	}
	body := struct {
		Ops []Op `json:"ops"`
	}{ops}
	var w struct {
		Results []wireResult `json:"results"`
	}
	replayed, err := c.do(ctx, c.mutation(http.MethodPost, "/batch", body, applyCall(opts)), &w)
	if err != nil {
		return nil, err
	}
	if len(w.Results) != len(ops) {
		return nil, errors.New("client: batch: the server answered with a different number of results")
	}
	rs := make([]Result, len(w.Results))
	for i := range w.Results {
		rs[i] = w.Results[i].result()
		rs[i].Replayed = replayed
		if rs[i].ID == "" {
			rs[i].ID = ops[i].ID
		}
	}
	return rs, nil
}
