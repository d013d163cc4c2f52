package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/httpjson"
)

// anyShard is contract.Op.Shard for "add to any shard" (the engine picks one).
const anyShard = 0

// Request bodies. Each turns into an contract.Op with op(); the batch route
// decodes its ops into the same types, so single and batch requests accept
// exactly the same fields.

// incrRequest is the body of increment and decrement.
type incrRequest struct {
	Delta       jsonDelta `json:"delta"` // default 1; any number (or a string) for kind float
	Kind        *string   `json:"kind"`  // counter, sharded, pn, window, float
	Granularity *string   `json:"granularity"`
	Window      *string   `json:"window"`
	Fixed       *bool     `json:"fixed"`
	Shards      jsonInt   `json:"shards"`
	// TS: the event time the increment counts at in window and rollup
	// buckets (docs/time.md, "Event time"); absent: now.
	TS jsonTime `json:"ts"`
}

func (q *incrRequest) op(id string, negate bool) (contract.Op, error) {
	op := contract.Op{Type: contract.OpAdd, ID: id, Delta: 1, Shard: anyShard, At: q.TS.At}
	if q.Kind != nil && *q.Kind == contract.KindFloat.String() {
		if q.TS.Set {
			return op, invalidArgf("ts does not apply to kind float")
		}
		return q.floatOp(op, negate)
	}
	if q.Delta.Set {
		d, err := q.Delta.integer()
		if err != nil {
			return op, err
		}
		op.Delta = d
	}
	if negate {
		if op.Delta == math.MinInt64 {
			return op, fmt.Errorf("%w: cannot decrement by %d", contract.ErrOverflow, op.Delta)
		}
		op.Delta = -op.Delta
	}
	kind := contract.KindNone
	if q.Kind != nil {
		k, err := contract.ParseKind(*q.Kind)
		if err != nil {
			return op, err
		}
		kind = k
	}
	if q.Granularity != nil || q.Window != nil || q.Fixed != nil {
		if kind == contract.KindNone {
			kind = contract.KindWindow
		}
		if kind != contract.KindWindow {
			return op, invalidArgf("granularity, window and fixed apply to kind window only")
		}
		if q.Granularity == nil || q.Window == nil {
			return op, invalidArgf("granularity and window must be given together")
		}
		g, err := parseDuration("granularity", *q.Granularity)
		if err != nil {
			return op, err
		}
		span, err := parseDuration("window", *q.Window)
		if err != nil {
			return op, err
		}
		fixed := q.Fixed != nil && *q.Fixed
		op.Window = newWindowSpec(g, span, fixed) // the engine validates it
	}
	if q.Shards.Set {
		if kind == contract.KindNone {
			kind = contract.KindSharded
		}
		if kind != contract.KindSharded {
			return op, invalidArgf("shards applies to kind sharded only")
		}
		if q.Shards.V < 1 || q.Shards.V > math.MaxInt32 {
			return op, invalidArgf("shards: %d out of range", q.Shards.V)
		}
		op.Shards = int(q.Shards.V)
	}
	op.Kind = kind
	return op, nil
}

// floatOp is the op of a float increment: the delta's text, negated for
// a decrement; the engine parses it (counter.ParseFloat).
func (q *incrRequest) floatOp(op contract.Op, negate bool) (contract.Op, error) {
	if q.Granularity != nil || q.Window != nil || q.Fixed != nil || q.Shards.Set {
		return op, invalidArgf("granularity, window, fixed and shards do not apply to kind float")
	}
	op.Kind, op.Delta, op.Float = contract.KindFloat, 0, "1"
	if q.Delta.Set {
		op.Float = q.Delta.Text
	}
	if negate {
		op.Float = negateText(op.Float)
	}
	return op, nil
}

// negateText negates a number's text by its sign.
func negateText(s string) string {
	switch {
	case strings.HasPrefix(s, "-"):
		return s[1:]
	case strings.HasPrefix(s, "+"):
		return "-" + s[1:]
	}
	return "-" + s
}

// setRequest is the body of PUT /counters/{id}.
type setRequest struct {
	Value           jsonInt  `json:"value"`
	ExpectedVersion jsonUint `json:"expected_version"` // 0: must not exist
	TTLMs           jsonInt  `json:"ttl_ms"`           // 0 or absent: no TTL
}

func (q *setRequest) op(id string) (contract.Op, error) {
	op := contract.Op{Type: contract.OpSet, ID: id, Value: q.Value.V}
	if !q.Value.Set {
		return op, invalidArgf("value: missing")
	}
	if q.ExpectedVersion.Set {
		op.CheckVersion = true
		op.ExpectedVersion = q.ExpectedVersion.V
	}
	if q.TTLMs.Set {
		ttl, err := ttlFromMillis("ttl_ms", q.TTLMs.V, 0)
		if err != nil {
			return op, err
		}
		op.TTL = ttl
	}
	return op, nil
}

// ttlRequest is the body of PUT /counters/{id}/ttl and of the batch op
// expire (where ttl_ms 0 removes the TTL).
type ttlRequest struct {
	TTLMs jsonInt `json:"ttl_ms"`
}

func (q *ttlRequest) op(id string, min int64) (contract.Op, error) {
	op := contract.Op{Type: contract.OpExpire, ID: id}
	if !q.TTLMs.Set {
		return op, invalidArgf("ttl_ms: missing")
	}
	ttl, err := ttlFromMillis("ttl_ms", q.TTLMs.V, min)
	if err != nil {
		return op, err
	}
	op.TTL = ttl
	return op, nil
}

// emptyRequest is the body of the batch op delete.
type emptyRequest struct{}

// pfaddRequest is the body of pfadd.
type pfaddRequest struct {
	Items *[]string `json:"items"`
	TS    jsonTime  `json:"ts"` // event time for the hour/day sketches; absent: now
}

func (q *pfaddRequest) op(id string) (contract.Op, error) {
	op := contract.Op{Type: contract.OpPFAdd, ID: id, Estimate: true, At: q.TS.At}
	if q.Items == nil {
		return op, invalidArgf("items: missing")
	}
	op.Items = make([][]byte, len(*q.Items))
	for i, s := range *q.Items {
		op.Items[i] = []byte(s)
	}
	return op, nil
}

// pfmergeRequest is the body of pfmerge.
type pfmergeRequest struct {
	Sources *[]string `json:"sources"`
}

func (q *pfmergeRequest) op(id string) (contract.Op, error) {
	op := contract.Op{Type: contract.OpPFMerge, ID: id}
	if q.Sources == nil {
		return op, invalidArgf("sources: missing")
	}
	for _, s := range *q.Sources {
		if err := contract.ValidateID(s); err != nil {
			return op, fmt.Errorf("sources: %w", err)
		}
	}
	op.Sources = append([]string{}, *q.Sources...)
	return op, nil
}

// hincrRequest is the body of hincr. A JSON integer adds an integer (Redis
// HINCRBY); any other number, or a string holding one, is a float
// increment kept as text (HINCRBYFLOAT).
type hincrRequest struct {
	Fields map[string]jsonDelta `json:"fields"`
}

func (q *hincrRequest) op(id string) (contract.Op, error) {
	op := contract.Op{Type: contract.OpHAdd, ID: id}
	if len(q.Fields) == 0 {
		return op, invalidArgf("fields: missing or empty")
	}
	names := make([]string, 0, len(q.Fields))
	for name := range q.Fields {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic op (idempotency compares requests)
	for _, name := range names {
		d := q.Fields[name]
		if v, err := d.integer(); err == nil {
			op.Fields = append(op.Fields, newFieldDelta(name, v))
			continue
		} else if !d.Str && isJSONInteger([]byte(d.Text)) {
			return op, err // an integer beyond int64
		}
		op.Fields = append(op.Fields, newFloatFieldDelta(name, d.Text))
	}
	return op, nil
}

// hdelRequest is the body of the batch op hdel: "field" and/or "fields".
type hdelRequest struct {
	Field  *string   `json:"field"`
	Fields *[]string `json:"fields"`
}

func (q *hdelRequest) op(id string) (contract.Op, error) {
	op := contract.Op{Type: contract.OpHDel, ID: id}
	if q.Field != nil {
		op.Names = append(op.Names, *q.Field)
	}
	if q.Fields != nil {
		op.Names = append(op.Names, *q.Fields...)
	}
	if len(op.Names) == 0 {
		return op, invalidArgf("field or fields: missing")
	}
	for _, n := range op.Names {
		if n == "" {
			return op, invalidArgf("field: empty name")
		}
	}
	return op, nil
}

// batchRequest is the body of POST /batch.
type batchRequest struct {
	Ops *[]json.RawMessage `json:"ops"`
}

// batchOpNames are the op names POST /batch accepts.
var batchOpNames = []string{"increment", "decrement", "set", "delete", "expire", "pfadd", "pfmerge", "hincr", "hdel"}

// decodeBatchOp decodes one op of a batch: {"op": NAME, "id": ID, ...the
// fields of the single route...}. It returns the op and its name.
func decodeBatchOp(raw json.RawMessage) (contract.Op, string, error) {
	b := httpjson.TrimSpace(raw)
	if len(b) == 0 || b[0] != '{' {
		return contract.Op{}, "", invalidArgf("op must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return contract.Op{}, "", httpjson.DecodeError(err)
	}
	name, err := stringMember(m, "op")
	if err != nil {
		return contract.Op{}, "", err
	}
	if !slices.Contains(batchOpNames, name) {
		return contract.Op{}, name, invalidArgf("op: unknown op %q", truncate(name, 40))
	}
	id, err := stringMember(m, "id")
	if err != nil {
		return contract.Op{}, name, err
	}
	if err := contract.ValidateID(id); err != nil {
		return contract.Op{}, name, err
	}
	delete(m, "op")
	delete(m, "id")
	rest, err := json.Marshal(m)
	if err != nil {
		return contract.Op{}, name, fmt.Errorf("%w: %v", httpjson.ErrInvalidJSON, err)
	}
	var op contract.Op
	switch name {
	case "increment", "decrement":
		var q incrRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id, name == "decrement")
		}
	case "set":
		var q setRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id)
		}
	case "delete":
		var q emptyRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op = contract.Op{Type: contract.OpDelete, ID: id}
		}
	case "expire":
		var q ttlRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id, 0)
		}
	case "pfadd":
		var q pfaddRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id)
		}
	case "pfmerge":
		var q pfmergeRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id)
		}
	case "hincr":
		var q hincrRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id)
		}
	case "hdel":
		var q hdelRequest
		if err = httpjson.DecodeStrict(rest, &q); err == nil {
			op, err = q.op(id)
		}
	}
	return op, name, err
}

// stringMember returns the required string member key of m.
func stringMember(m map[string]json.RawMessage, key string) (string, error) {
	raw, ok := m[key]
	if !ok {
		return "", invalidArgf("%s: missing", key)
	}
	raw = httpjson.TrimSpace(raw)
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalidArgf("%s: expected a string", key)
	}
	return s, nil
}
