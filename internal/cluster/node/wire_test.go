package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/rollup"
)

// Round trips of every peer message: a random request or response struct,
// converted to its message, marshalled, unmarshalled and converted back,
// equals the original. The structs are filled by reflection, every
// exported field (also those of the embedded header), so a field added to
// a struct without a wire field fails here.

// wireCase is one message type: its conversions as used by call and serve.
type wireCase struct {
	name   string
	typ    reflect.Type
	encode func(v any) (proto.Message, error)
	newMsg func() proto.Message
	decode func(m proto.Message) (any, error)
}

func requestCase[T any](name string, newMsg func() proto.Message, dec func(*decoder, proto.Message) T) wireCase {
	return wireCase{
		name: name, typ: reflect.TypeFor[T](), newMsg: newMsg,
		encode: func(v any) (proto.Message, error) {
			r := v.(T)
			m, _, err := encodeRequest(&r)
			return m, err
		},
		decode: func(m proto.Message) (any, error) {
			var d decoder
			r := dec(&d, m)
			return r, d.err
		},
	}
}

func responseCase[T any, M proto.Message](name string, enc func(*T) M) wireCase {
	return wireCase{
		name: name, typ: reflect.TypeFor[T](),
		newMsg: func() proto.Message { var m M; return m.ProtoReflect().New().Interface() },
		encode: func(v any) (proto.Message, error) {
			r := v.(T)
			return enc(&r), nil
		},
		decode: func(m proto.Message) (any, error) {
			var r T
			err := decodeResponse(m, &r)
			return r, err
		},
	}
}

var wireCases = []wireCase{
	requestCase("apply", func() proto.Message { return new(pb.ApplyRequest) }, func(d *decoder, m proto.Message) applyRequest { return d.applyRequest(m.(*pb.ApplyRequest)) }),
	requestCase("read", func() proto.Message { return new(pb.ReadRequest) }, func(d *decoder, m proto.Message) readRequest { return d.readRequest(m.(*pb.ReadRequest)) }),
	requestCase("local", func() proto.Message { return new(pb.LocalRequest) }, func(d *decoder, m proto.Message) localRequest { return d.localRequest(m.(*pb.LocalRequest)) }),
	requestCase("replicate", func() proto.Message { return new(pb.ReplicateRequest) }, func(d *decoder, m proto.Message) replicateRequest {
		return d.replicateRequest(m.(*pb.ReplicateRequest))
	}),
	requestCase("fetch", func() proto.Message { return new(pb.FetchRequest) }, func(d *decoder, m proto.Message) fetchRequest { return d.fetchRequest(m.(*pb.FetchRequest)) }),
	requestCase("digest", func() proto.Message { return new(pb.DigestRequest) }, func(d *decoder, m proto.Message) digestRequest { return d.digestRequest(m.(*pb.DigestRequest)) }),
	requestCase("limits", func() proto.Message { return new(pb.LimitsRequest) }, func(d *decoder, m proto.Message) limitsRequest { return d.limitsRequest(m.(*pb.LimitsRequest)) }),
	requestCase("policies", func() proto.Message { return new(pb.PoliciesRequest) }, func(d *decoder, m proto.Message) policiesRequest {
		return d.policiesRequest(m.(*pb.PoliciesRequest))
	}),
	requestCase("global limits", func() proto.Message { return new(pb.GlobalLimitsRequest) }, func(d *decoder, m proto.Message) globalRequest {
		return d.globalRequest(m.(*pb.GlobalLimitsRequest))
	}),
	responseCase("apply response", pbApplyResponse),
	responseCase("read response", pbReadResponse),
	responseCase("local response", pbLocalResponse),
	responseCase("replicate response", pbReplicateResponse),
	responseCase("fetch response", pbFetchResponse),
	responseCase("digest response", pbDigestResponse),
	responseCase("limits response", pbLimitsResponse),
	responseCase("policies response", pbPoliciesResponse),
	responseCase("global limits response", pbGlobalResponse),
}

// roundTrip encodes v, marshals, unmarshals and decodes it.
func (c *wireCase) roundTrip(v any) (any, []byte, error) {
	m, err := c.encode(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encode: %w", err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal: %w", err)
	}
	out := c.newMsg()
	if err := proto.Unmarshal(b, out); err != nil {
		return nil, b, fmt.Errorf("unmarshal: %w", err)
	}
	got, err := c.decode(out)
	return got, b, err
}

func TestWireRoundTrip(t *testing.T) {
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			zero := reflect.Zero(c.typ).Interface()
			got, _, err := c.roundTrip(zero)
			if err != nil || !wireEqual(got, zero) {
				t.Fatalf("zero value: got %+v, %v", got, err)
			}
			rapid.Check(t, func(t *rapid.T) {
				v := arbitrary(t, c.typ, c.name).Interface()
				got, _, err := c.roundTrip(v)
				if err != nil {
					t.Fatalf("round trip of %+v: %v", v, err)
				}
				if !wireEqual(got, v) {
					t.Fatalf("round trip changed the value:\n got %+v\nwant %+v", got, v)
				}
			})
		})
	}
}

// utf8Fields are the string fields that are protobuf strings (valid UTF-8:
// ids, node names); every other string may hold any bytes.
var utf8Fields = map[string]bool{
	"header.From": true, "Op.ID": true, "Op.Sources": true, "Result.ID": true,
	"wireError.Msg": true, "wireError.Owner": true, "wireError.ID": true,
	"View.ID": true, "ShardedSlot.Replica": true, "PNSlot.Replica": true,
	"readRequest.ID": true, "readRequest.IDs": true, "localRequest.Key": true, "localResponse.IDs": true,
	"viewRequest.Nodes": true, "viewRequest.Down": true, "viewAnswer.Incarnation": true, "handoffMark.Incarnation": true,
	"seriesQuery.ID": true, "State.ID": true, "Record.Claim": true, "Record.IDs": true,
	"markGroup.ID":  true,
	"digestItem.ID": true, "digestResponse.Want": true, "fetchRequest.IDs": true,
	"PolicyRecord.Name": true, "PolicyRecord.Node": true, "Policy.Name": true,
	"idemRecord.Origin": true, "idemRecord.Wrote": true, "replicateResponse.Stale": true,
	"Result.Float": true, "View.Float": true, // the engine writes them: always ASCII
	"ExceededError.Quota": true, "ExceededError.Namespace": true, "ExceededError.Limit": true, "ExceededError.ID": true,
}

// idemNotOnWire are the fields of the shared idempotency record (package
// idem, engine.IdemRecord) that peers do not exchange: a tiered claim's
// owner and deadline, and the stored form's extension (the cluster's own
// fields travel as idemRecord's).
var idemNotOnWire = map[string]bool{"Record.Owner": true, "Record.Deadline": true, "Record.Ext": true}

// enumStrings are string fields that hold one of a few names.
var enumStrings = map[string]func() []string{
	"wireError.Code":  func() []string { return append([]string{"internal"}, sentinelCodes()...) },
	"readRequest.Op":  func() []string { return enumOps(pb.ReadOp_name, "READ_OP_") },
	"localRequest.Op": func() []string { return enumOps(pb.LocalOp_name, "LOCAL_OP_") },
}

func enumOps(names map[int32]string, prefix string) []string {
	out := []string{""}
	for v := int32(1); names[v] != ""; v++ {
		out = append(out, strings.ToLower(strings.TrimPrefix(names[v], prefix)))
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// arbitrary draws a value of typ; field names the struct field it fills
// ("Type.Field"), which selects the overrides above.
func arbitrary(t *rapid.T, typ reflect.Type, field string) reflect.Value {
	v := reflect.New(typ).Elem()
	fill(t, v, field)
	return v
}

// fill sets v (settable, zero) to a drawn value. An embedded struct's
// fields are filled one by one: the embedded header is unexported.
func fill(t *rapid.T, v reflect.Value, field string) {
	typ := v.Type()
	switch {
	case typ == timeType:
		if rapid.Bool().Draw(t, field+" zero") {
			return
		}
		s := rapid.Int64Range(-62135596800+1, 253402300799).Draw(t, field+" s") // years 1..9999
		ns := rapid.Int64Range(0, 999999999).Draw(t, field+" ns")
		v.Set(reflect.ValueOf(time.Unix(s, ns).UTC()))
		return
	case enumStrings[field] != nil:
		v.SetString(rapid.SampledFrom(enumStrings[field]()).Draw(t, field))
		return
	}
	switch typ.Kind() {
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, field))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(rapid.Int64Range(minInt(typ.Bits()), maxInt(typ.Bits())).Draw(t, field))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rapid.Uint64Range(0, ^uint64(0)>>(64-typ.Bits())).Draw(t, field))
	case reflect.Float64:
		v.SetFloat(rapid.Float64().Draw(t, field))
	case reflect.String:
		if utf8Fields[field] {
			v.SetString(rapid.String().Draw(t, field))
		} else {
			v.SetString(string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, field)))
		}
	case reflect.Slice:
		n := rapid.IntRange(0, 3).Draw(t, field+" len")
		s := reflect.MakeSlice(typ, n, n)
		for i := 0; i < n; i++ {
			fill(t, s.Index(i), field)
		}
		v.Set(s)
	case reflect.Array:
		for i := 0; i < typ.Len(); i++ {
			fill(t, v.Index(i), field)
		}
	case reflect.Map:
		n := rapid.IntRange(0, 3).Draw(t, field+" len")
		m := reflect.MakeMap(typ)
		for i := 0; i < n; i++ {
			k, e := reflect.New(typ.Key()).Elem(), reflect.New(typ.Elem()).Elem()
			fill(t, k, field) // a map's keys: protobuf strings when utf8Fields says so
			fill(t, e, field+" value")
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		if rapid.Bool().Draw(t, field+" set") {
			v.Set(reflect.New(typ.Elem()))
			fill(t, v.Elem(), field)
		}
	case reflect.Struct:
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() && !f.Anonymous {
				t.Fatalf("%s.%s is unexported: it does not travel, keep it out of wire structs", typ.Name(), f.Name)
			}
			name := strings.TrimSuffix(typ.Name(), "[github.com/counterd/counterd/internal/contract.Result]") + "." + f.Name
			if idemNotOnWire[name] {
				continue
			}
			fill(t, v.Field(i), name)
		}
		if typ == reflect.TypeFor[wireResult]() {
			// serveApply sets both flags alike; the wire has one.
			v.FieldByName("Result").FieldByName("Replayed").SetBool(v.FieldByName("Replayed").Bool())
		}
	default:
		t.Fatalf("%s: no generator for %s; extend fill and wire.go", field, typ)
	}
}

func minInt(bits int) int64 { return -1 << (bits - 1) }
func maxInt(bits int) int64 { return 1<<(bits-1) - 1 }

// wireEqual compares a and b with empty slices equal to nil ones (the wire
// does not tell them apart).
func wireEqual(a, b any) bool {
	return reflect.DeepEqual(canonical(reflect.ValueOf(a)).Interface(), canonical(reflect.ValueOf(b)).Interface())
}

// canonical copies v with every empty slice nil.
func canonical(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	canonInto(out, v)
	return out
}

func canonInto(out, v reflect.Value) {
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			return
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			canonInto(s.Index(i), v.Index(i))
		}
		out.Set(s)
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			canonInto(out.Index(i), v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			canonInto(e, it.Value())
			m.SetMapIndex(it.Key(), e)
		}
		out.Set(m)
	case reflect.Pointer:
		if !v.IsNil() {
			out.Set(reflect.New(v.Type().Elem()))
			canonInto(out.Elem(), v.Elem())
		}
	case reflect.Struct:
		if v.Type() == timeType {
			out.Set(v)
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() || f.Anonymous {
				canonInto(out.Field(i), v.Field(i))
			}
		}
	case reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) {
			f = math.MaxFloat64 // NaN != NaN for DeepEqual; the wire keeps NaN
		}
		out.SetFloat(f)
	default:
		out.Set(v)
	}
}

// TestWireEnumsMatchEngine: enum values of peer.proto are the engine's
// numbers (wire.go converts by number), checked by name.
func TestWireEnumsMatchEngine(t *testing.T) {
	check := func(what string, names map[int32]string, prefix string, goName func(int32) string, first, last int32) {
		t.Helper()
		for v := first; v <= last; v++ {
			want := strings.ToUpper(goName(v))
			if got := strings.TrimPrefix(names[v], prefix); got != want {
				t.Errorf("%s %d: peer.proto says %q, Go says %q", what, v, names[v], want)
			}
		}
		if names[last+1] != "" {
			t.Errorf("%s: peer.proto has %s beyond the Go values", what, names[last+1])
		}
	}
	check("kind", pb.Kind_name, "KIND_", func(v int32) string { return contract.Kind(v).String() }, 0, int32(contract.KindFloat))
	check("durability", pb.Durability_name, "DURABILITY_", func(v int32) string { return contract.Durability(v).String() }, 0, int32(contract.Sync))
	check("op type", pb.OpType_name, "OP_TYPE_", func(v int32) string { return contract.OpType(v).String() }, 1, int32(contract.OpHSet))
	check("granularity", pb.Granularity_name, "GRANULARITY_", func(v int32) string { return rollup.Granularity(v).String() }, 0, int32(rollup.Month))
	check("algorithm", pb.Algorithm_name, "ALGORITHM_", func(v int32) string { return ratelimit.Algorithm(v).String() }, 1, int32(ratelimit.LeakyBucket))
	if contract.Kind(contract.KindFloat+1).String() != fmt.Sprintf("kind(%d)", contract.KindFloat+1) || contract.OpType(contract.OpHSet+1).String() != fmt.Sprintf("op(%d)", contract.OpHSet+1) {
		t.Error("the engine has kinds or ops beyond those checked here: add them to peer.proto")
	}
	if pb.SetMode_SET_MODE_ALWAYS != pb.SetMode(contract.SetAlways) || pb.SetMode_SET_MODE_IF_ABSENT != pb.SetMode(contract.SetIfAbsent) ||
		pb.SetMode_SET_MODE_IF_EXISTS != pb.SetMode(contract.SetIfExists) {
		t.Error("set modes differ")
	}
}

// TestWireErrorCodes: every sentinel crosses a peer call as its own
// ErrorCode and comes back as the same sentinel; unknown codes read as
// internal errors that keep their message.
func TestWireErrorCodes(t *testing.T) {
	for _, s := range sentinels {
		if _, ok := errorCodes[s.code]; !ok {
			t.Fatalf("code %q has no ErrorCode", s.code)
		}
		in := &contract.BatchError{Index: 3, Err: fmt.Errorf("boom: %w", s.err)}
		if s.code == "wrong_owner" {
			in = &contract.BatchError{Index: -1, Err: &WrongOwnerError{ID: "x", Owner: "n3", RingVersion: 9}}
		}
		p := pbError(toWire(in))
		if want := "ERROR_CODE_" + strings.ToUpper(s.code); p.GetCode().String() != want {
			t.Errorf("%s: wire code %v, want %s", s.code, p.GetCode(), want)
		}
		b, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back pb.Error
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := goError(&back).err("n2", nil)
		if !errors.Is(got, s.err) {
			t.Errorf("%s: decoded %v, not %v", s.code, got, s.err)
		}
		var be *contract.BatchError
		var wo *WrongOwnerError
		switch {
		case s.code == "wrong_owner":
			if !errors.As(got, &wo) || wo.ID != "x" || wo.Owner != "n3" || wo.RingVersion != 9 {
				t.Errorf("wrong owner decoded as %#v", got)
			}
		case !errors.As(got, &be) || be.Index != 3:
			t.Errorf("%s: batch index lost: %v", s.code, got)
		}
	}
	for _, code := range []pb.ErrorCode{pb.ErrorCode_ERROR_CODE_UNSPECIFIED, 999} {
		w := goError(&pb.Error{Code: code, Msg: "from a newer peer", Index: -1})
		err := w.err("n2", nil)
		if w.Code != "internal" || err == nil || !strings.Contains(err.Error(), "from a newer peer") {
			t.Errorf("code %d: %+v, %v", code, w, err)
		}
	}
	if p := pbError(&wireError{Code: "internal", Msg: "bad \xff byte", Index: -1}); p.Msg != "bad \uFFFD byte" {
		t.Errorf("invalid UTF-8 message sent as %q", p.Msg)
	}
	if pbError(nil) != nil || goError(nil) != nil {
		t.Error("nil error does not stay nil")
	}
}

// TestWireQuotaError: a quota's refusal crosses a peer call with its
// quota, namespace, limit and max, so the caller's front ends name them
// (HTTP body, RESP -OOM) as the owner's would, inside a batch too.
func TestWireQuotaError(t *testing.T) {
	for _, in := range []error{
		&quota.ExceededError{Quota: "q:*", Limit: "max_keys", Max: 10, ID: "q:a"},
		&contract.BatchError{Index: 2, Err: &quota.ExceededError{Quota: quota.DefaultName, Namespace: "ns\xff", Limit: "max_hash_fields", Max: 3, ID: "ns:h"}},
	} {
		b, err := proto.Marshal(pbError(toWire(in)))
		if err != nil {
			t.Fatal(err)
		}
		var back pb.Error
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := goError(&back).err("n2", nil)
		var want, qe *quota.ExceededError
		if !errors.As(in, &want) {
			t.Fatal("test input is not a quota error")
		}
		if !errors.Is(got, contract.ErrQuotaExceeded) || !errors.As(got, &qe) {
			t.Fatalf("%v decoded as %v, not a quota error", in, got)
		}
		w := *want
		w.Namespace = strings.ToValidUTF8(w.Namespace, "\uFFFD")
		if *qe != w {
			t.Errorf("decoded %+v, want %+v", *qe, w)
		}
		if m := quota.Message(got); m != w.Error() {
			t.Errorf("message %q, want %q", m, w.Error())
		}
		var be *contract.BatchError
		if errors.As(in, &be) && (!errors.As(got, &be) || be.Index != 2) {
			t.Errorf("batch index lost: %v", got)
		}
	}
}

// TestWireStateDataIsBytes: an HLL sketch (a dense one is 16 KiB at p=14)
// travels as its raw bytes, not base64.
func TestWireStateDataIsBytes(t *testing.T) {
	h, err := counter.NewHLL(14)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50000; i++ {
		h.Add([]byte(fmt.Sprint("member-", i)))
	}
	data, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	st := State{ID: "u:visitors", Kind: contract.KindHLL, Version: 7, UpdatedAt: time.Now().UnixNano(), Data: data}
	c := wireCases[3] // replicate
	got, b, err := c.roundTrip(replicateRequest{header: header{From: "n1", RingVersion: 3}, States: []State{st}, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	back := got.(replicateRequest).States[0]
	if !reflect.DeepEqual(back, st) {
		t.Fatalf("state changed: %+v", back)
	}
	if len(b) > len(data)+64 {
		t.Fatalf("a %d-byte sketch takes %d bytes on the wire", len(data), len(b))
	}
	h2 := new(counter.HLL)
	if err := h2.UnmarshalBinary(back.Data); err != nil || h2.Count() != h.Count() {
		t.Fatalf("sketch after the wire: %v, count %d want %d", err, h2.Count(), h.Count())
	}
}

// TestWireMalformed: values a well-formed message can hold but the node's
// types cannot are typed errors, on both sides of a call.
func TestWireMalformed(t *testing.T) {
	var d decoder
	d.applyRequest(&pb.ApplyRequest{Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_ADD, Id: "a", Kind: 300}}})
	if !errors.Is(d.err, ErrMalformedMessage) {
		t.Errorf("kind 300: %v", d.err)
	}
	d = decoder{}
	d.limitsRequest(&pb.LimitsRequest{Entries: []*pb.LimitEntry{{Key: []byte("k"), State: []int64{1, 2}}}})
	if !errors.Is(d.err, ErrMalformedMessage) {
		t.Errorf("short rate-limit state: %v", d.err)
	}
	var resp readResponse
	if err := decodeResponse(&pb.ReadResponse{View: &pb.View{Precision: 1 << 20}}, &resp); !errors.Is(err, ErrMalformedMessage) {
		t.Errorf("precision 2^20: %v", err)
	}
	if _, _, err := encodeRequest(&localRequest{Op: "no-such-op"}); err == nil {
		t.Error("an op without a wire value was encoded")
	}
	if _, _, err := encodeRequest(&struct{}{}); err == nil {
		t.Error("an unknown request type was encoded")
	}
	// Unknown enum values of ops read as "", which the receiver answers as
	// an unknown operation.
	d = decoder{}
	if r := d.localRequest(&pb.LocalRequest{Op: 99}); r.Op != "" || d.err != nil {
		t.Errorf("local op 99: %q, %v", r.Op, d.err)
	}
}

// FuzzWireDecode feeds arbitrary bytes to every message's decoding path:
// it must not panic; what unmarshals either decodes or fails with
// ErrMalformedMessage, and what decodes survives a second round trip
// unchanged.
func FuzzWireDecode(f *testing.F) {
	seeds := []any{
		applyRequest{header: header{From: "n1", RingVersion: 2, Hop: true}, Ops: []contract.Op{{Type: contract.OpAdd, ID: "a", Delta: 1}}, IdemKey: "k"},
		readRequest{Op: "series", ID: "a", From: time.Unix(60, 0).UTC(), To: time.Unix(120, 0).UTC()},
		localRequest{Op: "aggregate", Prefix: "a", View: &viewRequest{Nodes: []string{"n1"}}, Mark: &handoffMark{Nodes: 77, Incarnation: "ab", Version: 5}},
		replicateRequest{States: []State{{ID: "a", Kind: contract.KindHLL, Data: []byte{1, 2, 3}}}, Idem: []idemRecord{{IdemRecord: engine.IdemRecord{Key: "k", Results: []contract.Result{{ID: "a"}}}, Origin: "n2",
			Undo: []contract.Op{{Type: contract.OpAdd, ID: "a", Kind: contract.KindPN, Delta: -1}}, Wrote: map[string][]uint64{"a": {1 << 32, 7 << 32}}}}},
		fetchRequest{IDs: []string{"a", "b"}, Claims: []uint32{3, 0}},
		digestRequest{Items: []digestItem{{ID: "a", Version: 1, Sum: 2}}},
		limitsRequest{Entries: []ratelimit.Entry{{Key: "k", Log: [][2]int64{{1, 2}}}}},
		policiesRequest{Records: []ratelimit.PolicyRecord{{Name: "p", Policy: &ratelimit.Policy{Name: "p", Limit: 3}}}},
		globalRequest{header: header{From: "n1"}, Reports: []ratelimit.GlobalReport{{Key: "k", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 5, Period: time.Second, Scope: ratelimit.ScopeGlobalApprox}, Window: 9, Used: 2, Demand: 4}}},
		applyResponse{Results: []wireResult{{Result: contract.Result{ID: "a", Fields: []counter.Field{{Name: "f", Value: 1}}}}}},
		readResponse{View: &contract.View{ID: "a", Buckets: []counter.Bucket{{Start: time.Unix(60, 0).UTC(), Count: 2}}}, Err: &wireError{Code: "not_found", Index: -1}},
		localResponse{Aggregate: contract.Aggregate{Prefix: "a", Value: 3, Count: 1}, View: &viewAnswer{Version: 4}, Mark: &handoffMark{Nodes: 9, Incarnation: "cd", Version: 2}},
		replicateResponse{Changed: 2, Stale: []string{"a"}},
		fetchResponse{Nodes: 77, Refused: []uint32{0, 5}},
		digestResponse{Want: []string{"a"}},
		limitsResponse{Merged: 1},
		policiesResponse{Err: &wireError{Code: "unavailable", Index: -1}},
		globalResponse{Shares: []ratelimit.GlobalShare{{Key: "k", Window: 9, Share: 3, Next: 2}}},
		leaseRequest{header: header{From: "n1", RingVersion: 3}},
		leaseResponse{Granted: true, Nodes: 77, Wait: time.Second},
		markedRequest{header: header{From: "n1", Hop: true}, TTL: time.Hour, Ops: []contract.MarkedOp{{Op: contract.Op{Type: contract.OpAdd, ID: "a", Delta: 1}, Marks: []string{"e1", "e2"}}}},
		markedResponse{Seen: [][]string{nil, {"e1"}}},
	}
	for i, c := range wireCases {
		m, err := c.encode(seeds[i])
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(0), []byte{0x12, 0x03, 0x18, 0xac, 0x02}) // an op of kind 300
	f.Add(uint8(6), []byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		c := wireCases[int(which)%len(wireCases)]
		m := c.newMsg()
		if proto.Unmarshal(b, m) != nil {
			return // gRPC answers codes.Internal before the node sees it
		}
		v, err := c.decode(m)
		if err != nil {
			if !errors.Is(err, ErrMalformedMessage) {
				t.Fatalf("%s: untyped error %v", c.name, err)
			}
			return
		}
		again, _, err := c.roundTrip(v)
		if err != nil {
			t.Fatalf("%s: decoded %+v does not encode again: %v", c.name, v, err)
		}
		if !wireEqual(again, v) {
			t.Fatalf("%s: second round trip changed\n %+v\nto %+v", c.name, v, again)
		}
	})
}

// rawCodec sends bytes as they are, to put garbage on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestWireGarbageOverGRPC: a running node's peer service answers bytes
// that are not a message with a gRPC error, a message with values out of
// range and an unknown operation with typed errors, and keeps serving.
func TestWireGarbageOverGRPC(t *testing.T) {
	c := newTestCluster(t, "n1")
	n1 := c.node("n1").n
	conn, err := grpc.NewClient("passthrough:///"+n1.peers.get("n1").GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, garbage := range [][]byte{{0xff, 0xff, 0xff}, {0x0a, 0x7f}, {0x12, 0x05, 0x18}} {
		var out []byte
		err := conn.Invoke(ctx, "/"+serviceName+"/Apply", garbage, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.Internal {
			t.Errorf("garbage %x: %v, want codes.Internal", garbage, err)
		}
	}
	peer := pb.NewPeerClient(conn)
	hdr := &pb.Header{From: "n1"}
	resp, err := peer.Apply(ctx, &pb.ApplyRequest{Header: hdr, Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_ADD, Id: "g", Delta: 1, Kind: 300}}})
	if err != nil || resp.GetErr().GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(resp.GetErr().GetMsg(), ErrMalformedMessage.Error()) {
		t.Errorf("kind 300: %v, %v", resp, err)
	}
	local, err := peer.Local(ctx, &pb.LocalRequest{Header: hdr, Op: 99})
	if err != nil || local.GetErr().GetCode() != pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Errorf("local op 99: %v, %v", local, err)
	}
	var res applyResponse
	req := &applyRequest{header: n1.header(false), Ops: []contract.Op{{Type: contract.OpAdd, ID: "g", Delta: 2}}, Durability: contract.Sync}
	if err := n1.call(ctx, "n1", "Apply", req, &res); err != nil || res.Err != nil || len(res.Results) != 1 || res.Results[0].Value != 2 {
		t.Fatalf("a valid apply after the garbage: %+v, %v", res, err)
	}
	if v, err := n1.Get(ctx, "g"); err != nil || v.Value != 2 {
		t.Fatalf("g = %+v, %v; want 2 (malformed requests changed nothing)", v, err)
	}
}
