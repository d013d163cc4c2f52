package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/quota"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/rollup"
)

// The peer service's wire format is protobuf, generated from
// api/counterd/cluster/v1/peer.proto (make generate). This file is the
// only place that knows it: it converts the node's request and response
// structs (rpc.go) to the generated messages and back at the gRPC
// boundary, so the rest of the node keeps using its own types. A field
// added to a request or response struct must be added to the .proto and
// converted here; the round-trip property tests (wire_test.go) fail until
// it is.

// ErrMalformedMessage is a peer message that parses as protobuf but does
// not fit the node's types: an enum or precision beyond its range, a
// rate-limit state of the wrong length. A malformed request is answered
// with an error wrapping contract.ErrInvalidArgument; a malformed response
// is an *UnavailableError of the call.
var ErrMalformedMessage = errors.New("cluster: malformed peer message")

// Register adds the peer service to s (the --grpc server).
func (n *Node) Register(s *grpc.Server) { pb.RegisterPeerServer(s, peerServer{n: n}) }

// invoke calls method on conn with req, filling resp (pointers to the
// node's structs).
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req, resp any) error {
	in, out, err := encodeRequest(req)
	if err != nil {
		return err
	}
	if err := conn.Invoke(ctx, "/"+serviceName+"/"+method, in, out); err != nil {
		return err
	}
	return decodeResponse(out, resp)
}

// encodeRequest returns the message of req and an empty message for its
// response.
func encodeRequest(req any) (in, out proto.Message, err error) {
	switch r := req.(type) {
	case *applyRequest:
		return pbApplyRequest(r), new(pb.ApplyResponse), nil
	case *readRequest:
		p, err := pbReadRequest(r)
		return p, new(pb.ReadResponse), err
	case *localRequest:
		p, err := pbLocalRequest(r)
		return p, new(pb.LocalResponse), err
	case *replicateRequest:
		return pbReplicateRequest(r), new(pb.ReplicateResponse), nil
	case *fetchRequest:
		return pbFetchRequest(r), new(pb.FetchResponse), nil
	case *digestRequest:
		return pbDigestRequest(r), new(pb.DigestResponse), nil
	case *limitsRequest:
		return pbLimitsRequest(r), new(pb.LimitsResponse), nil
	case *policiesRequest:
		return pbPoliciesRequest(r), new(pb.PoliciesResponse), nil
	case *leaseRequest:
		return pbLeaseRequest(r), new(pb.LeaseResponse), nil
	case *globalRequest:
		return pbGlobalRequest(r), new(pb.GlobalLimitsResponse), nil
	case *markedRequest:
		return pbMarkedRequest(r), new(pb.ApplyMarkedResponse), nil
	}
	return nil, nil, fmt.Errorf("cluster: no peer message for %T", req)
}

// decodeResponse converts the message out into resp.
func decodeResponse(out proto.Message, resp any) error {
	var d decoder
	switch r := resp.(type) {
	case *applyResponse:
		*r = d.applyResponse(out.(*pb.ApplyResponse))
	case *readResponse:
		*r = d.readResponse(out.(*pb.ReadResponse))
	case *localResponse:
		*r = d.localResponse(out.(*pb.LocalResponse))
	case *replicateResponse:
		*r = d.replicateResponse(out.(*pb.ReplicateResponse))
	case *fetchResponse:
		*r = d.fetchResponse(out.(*pb.FetchResponse))
	case *digestResponse:
		*r = d.digestResponse(out.(*pb.DigestResponse))
	case *limitsResponse:
		*r = d.limitsResponse(out.(*pb.LimitsResponse))
	case *policiesResponse:
		*r = d.policiesResponse(out.(*pb.PoliciesResponse))
	case *leaseResponse:
		*r = d.leaseResponse(out.(*pb.LeaseResponse))
	case *globalResponse:
		*r = d.globalResponse(out.(*pb.GlobalLimitsResponse))
	case *markedResponse:
		*r = d.markedResponse(out.(*pb.ApplyMarkedResponse))
	default:
		return fmt.Errorf("cluster: no peer message for %T", resp)
	}
	return d.err
}

// peerServer serves the generated service with the node's handlers.
type peerServer struct {
	pb.UnimplementedPeerServer
	n *Node
}

// serve decodes a request, refuses a forgotten sender (forget.go), runs
// f and encodes its answer. A malformed request is answered by fail with
// an error wrapping contract.ErrInvalidArgument.
func serve[Req, Resp, Out any](n *Node, ctx context.Context, decode func(*decoder) Req,
	f func(*Node, context.Context, *Req) *Resp, fail func(*wireError) *Resp, encode func(*Resp) Out,
) (out Out, err error) {
	var d decoder
	req := decode(&d)
	if h, ok := any(&req).(interface{ sender() string }); ok {
		if err := n.refusePeer(h.sender()); err != nil {
			return out, err
		}
	}
	if d.err != nil {
		return encode(fail(toWire(fmt.Errorf("%w: %w", contract.ErrInvalidArgument, d.err)))), nil
	}
	return encode(f(n, ctx, &req)), nil
}

func (s peerServer) Apply(ctx context.Context, p *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	return serve(s.n, ctx, func(d *decoder) applyRequest { return d.applyRequest(p) }, (*Node).serveApply,
		func(e *wireError) *applyResponse { return &applyResponse{Err: e} }, pbApplyResponse)
}

func (s peerServer) Read(ctx context.Context, p *pb.ReadRequest) (*pb.ReadResponse, error) {
	return serve(s.n, ctx, func(d *decoder) readRequest { return d.readRequest(p) }, (*Node).serveRead,
		func(e *wireError) *readResponse { return &readResponse{Err: e} }, pbReadResponse)
}

func (s peerServer) Local(ctx context.Context, p *pb.LocalRequest) (*pb.LocalResponse, error) {
	return serve(s.n, ctx, func(d *decoder) localRequest { return d.localRequest(p) }, (*Node).serveLocal,
		func(e *wireError) *localResponse { return &localResponse{Err: e} }, pbLocalResponse)
}

func (s peerServer) ApplyMarked(ctx context.Context, p *pb.ApplyMarkedRequest) (*pb.ApplyMarkedResponse, error) {
	return serve(s.n, ctx, func(d *decoder) markedRequest { return d.markedRequest(p) }, (*Node).serveApplyMarked,
		func(e *wireError) *markedResponse { return &markedResponse{Err: e} }, pbMarkedResponse)
}

func (s peerServer) Replicate(ctx context.Context, p *pb.ReplicateRequest) (*pb.ReplicateResponse, error) {
	return serve(s.n, ctx, func(d *decoder) replicateRequest { return d.replicateRequest(p) }, (*Node).serveReplicate,
		func(e *wireError) *replicateResponse { return &replicateResponse{Err: e} }, pbReplicateResponse)
}

func (s peerServer) Fetch(ctx context.Context, p *pb.FetchRequest) (*pb.FetchResponse, error) {
	return serve(s.n, ctx, func(d *decoder) fetchRequest { return d.fetchRequest(p) }, (*Node).serveFetch,
		func(e *wireError) *fetchResponse { return &fetchResponse{Err: e} }, pbFetchResponse)
}

func (s peerServer) Digest(ctx context.Context, p *pb.DigestRequest) (*pb.DigestResponse, error) {
	return serve(s.n, ctx, func(d *decoder) digestRequest { return d.digestRequest(p) }, (*Node).serveDigest,
		func(e *wireError) *digestResponse { return &digestResponse{Err: e} }, pbDigestResponse)
}

func (s peerServer) Limits(ctx context.Context, p *pb.LimitsRequest) (*pb.LimitsResponse, error) {
	return serve(s.n, ctx, func(d *decoder) limitsRequest { return d.limitsRequest(p) }, (*Node).serveLimits,
		func(e *wireError) *limitsResponse { return &limitsResponse{Err: e} }, pbLimitsResponse)
}

func (s peerServer) Policies(ctx context.Context, p *pb.PoliciesRequest) (*pb.PoliciesResponse, error) {
	return serve(s.n, ctx, func(d *decoder) policiesRequest { return d.policiesRequest(p) }, (*Node).servePolicies,
		func(e *wireError) *policiesResponse { return &policiesResponse{Err: e} }, pbPoliciesResponse)
}

func (s peerServer) GlobalLimits(ctx context.Context, p *pb.GlobalLimitsRequest) (*pb.GlobalLimitsResponse, error) {
	return serve(s.n, ctx, func(d *decoder) globalRequest { return d.globalRequest(p) }, (*Node).serveGlobal,
		func(e *wireError) *globalResponse { return &globalResponse{Err: e} }, pbGlobalResponse)
}

// decoder converts messages to the node's types, keeping the first
// ErrMalformedMessage. Its methods read through the generated getters, so
// a nil message is the zero value.
type decoder struct{ err error }

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformedMessage}, args...)...)
	}
}

// u8 is an enum or precision that the node keeps in a uint8.
func u8[T ~int32 | ~uint32](d *decoder, v T, what string) uint8 {
	if v < 0 || int64(v) > math.MaxUint8 {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return uint8(v)
}

// Slices: empty is nil both ways.

func encodeEach[T, P any](in []T, f func(*T) P) []P {
	if len(in) == 0 {
		return nil
	}
	out := make([]P, len(in))
	for i := range in {
		out[i] = f(&in[i])
	}
	return out
}

func decodeEach[P, T any](in []P, f func(P) T) []T {
	if len(in) == 0 {
		return nil
	}
	out := make([]T, len(in))
	for i, p := range in {
		out[i] = f(p)
	}
	return out
}

func toBytes(s *string) []byte { return []byte(*s) }
func toString(b []byte) string { return string(b) }

func orNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Times: the zero time is an absent Timestamp; others decode in UTC.

func pbTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return &timestamppb.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

func goTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return time.Unix(ts.GetSeconds(), int64(ts.GetNanos())).UTC()
}

// Header and errors.

func pbHeader(h *header) *pb.Header {
	return &pb.Header{From: h.From, RingVersion: h.RingVersion, Hop: h.Hop}
}

func goHeader(p *pb.Header) header {
	return header{From: p.GetFrom(), RingVersion: p.GetRingVersion(), Hop: p.GetHop()}
}

// errorCodes maps wireError codes to ErrorCode values by name
// (ERROR_CODE_ + the code in upper case); every sentinel has one.
var errorCodes = func() map[string]pb.ErrorCode {
	m := map[string]pb.ErrorCode{}
	for _, code := range append([]string{"internal"}, sentinelCodes()...) {
		v, ok := pb.ErrorCode_value["ERROR_CODE_"+strings.ToUpper(code)]
		if !ok {
			panic("cluster: error code " + code + " has no ErrorCode in peer.proto")
		}
		m[code] = pb.ErrorCode(v)
	}
	return m
}()

func sentinelCodes() []string {
	out := make([]string, len(sentinels))
	for i, s := range sentinels {
		out[i] = s.code
	}
	return out
}

func pbError(w *wireError) *pb.Error {
	if w == nil {
		return nil
	}
	code, ok := errorCodes[w.Code]
	if !ok {
		code = pb.ErrorCode_ERROR_CODE_INTERNAL
	}
	e := &pb.Error{Code: code, Msg: strings.ToValidUTF8(w.Msg, "\uFFFD"), Index: int64(w.Index), Owner: w.Owner, Ring: w.Ring, Id: w.ID}
	if q := w.Quota; q != nil {
		utf := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
		e.Quota = &pb.QuotaError{Quota: utf(q.Quota), Namespace: utf(q.Namespace), Limit: utf(q.Limit), Max: q.Max, Id: utf(q.ID)}
	}
	return e
}

// goError decodes e; an unknown or unspecified code is "internal" (the
// error then keeps only its message).
func goError(e *pb.Error) *wireError {
	if e == nil {
		return nil
	}
	code := "internal"
	if name, ok := pb.ErrorCode_name[int32(e.GetCode())]; ok && e.GetCode() != pb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		code = strings.ToLower(strings.TrimPrefix(name, "ERROR_CODE_"))
	}
	w := &wireError{Code: code, Msg: e.GetMsg(), Index: int(e.GetIndex()), Owner: e.GetOwner(), Ring: e.GetRing(), ID: e.GetId()}
	if q := e.GetQuota(); q != nil {
		w.Quota = &quota.ExceededError{Quota: q.GetQuota(), Namespace: q.GetNamespace(), Limit: q.GetLimit(), Max: q.GetMax(), ID: q.GetId()}
	}
	return w
}

// opName maps the op strings of read and local requests to their enum
// (prefix + the op in upper case). "" is the unspecified value, which the
// receiver answers as an unknown operation.
func opValue(values map[string]int32, prefix, op string) (int32, error) {
	if op == "" {
		return 0, nil
	}
	v, ok := values[prefix+strings.ToUpper(op)]
	if !ok {
		return 0, fmt.Errorf("cluster: peer operation %q has no %sxxx value in peer.proto", op, prefix)
	}
	return v, nil
}

func opName(names map[int32]string, prefix string, v int32) string {
	if v == 0 {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(names[v], prefix)) // unknown: ""
}

// Engine types.

func pbWindow(w *counter.WindowSpec) *pb.WindowSpec {
	if *w == (counter.WindowSpec{}) {
		return nil
	}
	return &pb.WindowSpec{GranularityNs: int64(w.Granularity), SpanNs: int64(w.Span), Fixed: w.Fixed}
}

func goWindow(p *pb.WindowSpec) counter.WindowSpec {
	return counter.WindowSpec{Granularity: time.Duration(p.GetGranularityNs()), Span: time.Duration(p.GetSpanNs()), Fixed: p.GetFixed()}
}

func pbField(f *counter.Field) *pb.Field {
	return &pb.Field{Name: []byte(f.Name), Value: f.Value, FloatText: bytesOf(f.Float)}
}

// bytesOf is s as bytes, nil when empty (so the field is not sent).
func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func goField(p *pb.Field) counter.Field {
	return counter.Field{Name: string(p.GetName()), Value: p.GetValue(), Float: string(p.GetFloatText())}
}

func pbOp(o *contract.Op) *pb.Op {
	return &pb.Op{
		Type: pb.OpType(o.Type), Id: o.ID, Kind: pb.Kind(o.Kind),
		Delta: o.Delta, Value: o.Value,
		ExpectedVersion: o.ExpectedVersion, CheckVersion: o.CheckVersion,
		SetMode: pb.SetMode(o.SetMode), KeepTtl: o.KeepTTL, TtlNs: int64(o.TTL),
		Items: o.Items, Sources: o.Sources,
		Fields: encodeEach(o.Fields, func(f *counter.FieldDelta) *pb.FieldDelta {
			return &pb.FieldDelta{Name: []byte(f.Name), Delta: f.Delta, FloatText: bytesOf(f.Float)}
		}),
		Names: encodeEach(o.Names, toBytes), Window: pbWindow(&o.Window),
		Shards: int64(o.Shards), Shard: int64(o.Shard),
		HllPrecision: uint32(o.HLLPrecision), Estimate: o.Estimate,
		FloatText: []byte(o.Float), ExpireAtNs: o.ExpireAt, AtNs: o.At,
	}
}

func (d *decoder) op(p *pb.Op) contract.Op {
	return contract.Op{
		Type: contract.OpType(u8(d, p.GetType(), "op type")), ID: p.GetId(),
		Kind:  contract.Kind(u8(d, p.GetKind(), "kind")),
		Delta: p.GetDelta(), Value: p.GetValue(),
		ExpectedVersion: p.GetExpectedVersion(), CheckVersion: p.GetCheckVersion(),
		SetMode: contract.SetMode(u8(d, p.GetSetMode(), "set mode")),
		KeepTTL: p.GetKeepTtl(), TTL: time.Duration(p.GetTtlNs()),
		Items: orNil(p.GetItems()), Sources: orNil(p.GetSources()),
		Fields: decodeEach(p.GetFields(), func(f *pb.FieldDelta) counter.FieldDelta {
			return counter.FieldDelta{Name: string(f.GetName()), Delta: f.GetDelta(), Float: string(f.GetFloatText())}
		}),
		Names: decodeEach(p.GetNames(), toString), Window: goWindow(p.GetWindow()),
		Shards: int(p.GetShards()), Shard: int(p.GetShard()),
		HLLPrecision: u8(d, p.GetHllPrecision(), "hll precision"), Estimate: p.GetEstimate(),
		Float: string(p.GetFloatText()), ExpireAt: p.GetExpireAtNs(), At: p.GetAtNs(),
	}
}

func pbResult(r *contract.Result) *pb.Result {
	return &pb.Result{Id: r.ID, Kind: pb.Kind(r.Kind), Value: r.Value, Version: r.Version, Changed: r.Changed,
		Fields: encodeEach(r.Fields, pbField), Replayed: r.Replayed, FloatText: r.Float}
}

func (d *decoder) result(p *pb.Result) contract.Result {
	return contract.Result{ID: p.GetId(), Kind: contract.Kind(u8(d, p.GetKind(), "kind")), Value: p.GetValue(),
		Version: p.GetVersion(), Changed: p.GetChanged(), Fields: decodeEach(p.GetFields(), goField), Replayed: p.GetReplayed(),
		Float: p.GetFloatText()}
}

func pbView(v *contract.View) *pb.View {
	if v == nil {
		return nil
	}
	return &pb.View{
		Id: v.ID, Kind: pb.Kind(v.Kind), Exists: v.Exists, Value: v.Value, Version: v.Version, FloatText: v.Float,
		UpdatedAt: pbTime(v.UpdatedAt), ExpiresAt: pbTime(v.ExpiresAt),
		Shards: v.Shards,
		ShardSlots: encodeEach(v.ShardSlots, func(s *counter.ShardedSlot) *pb.ShardedSlot {
			return &pb.ShardedSlot{Replica: s.Replica, Sum: s.Sum, Seq: s.Seq}
		}),
		Replicas: encodeEach(v.Replicas, func(s *counter.PNSlot) *pb.PNSlot {
			return &pb.PNSlot{Replica: s.Replica, P: s.P, N: s.N}
		}),
		StdError: v.StdError, Precision: uint32(v.Precision),
		Fields: encodeEach(v.Fields, pbField), Window: pbWindow(&v.Window),
		Buckets: encodeEach(v.Buckets, func(b *counter.Bucket) *pb.Bucket {
			return &pb.Bucket{Start: pbTime(b.Start), Count: b.Count}
		}),
	}
}

func (d *decoder) view(p *pb.View) *contract.View {
	if p == nil {
		return nil
	}
	return &contract.View{
		ID: p.GetId(), Kind: contract.Kind(u8(d, p.GetKind(), "kind")), Exists: p.GetExists(),
		Value: p.GetValue(), Version: p.GetVersion(), Float: p.GetFloatText(),
		UpdatedAt: goTime(p.GetUpdatedAt()), ExpiresAt: goTime(p.GetExpiresAt()),
		Shards: orNil(p.GetShards()),
		ShardSlots: decodeEach(p.GetShardSlots(), func(s *pb.ShardedSlot) counter.ShardedSlot {
			return counter.ShardedSlot{Replica: s.GetReplica(), Sum: s.GetSum(), Seq: s.GetSeq()}
		}),
		Replicas: decodeEach(p.GetReplicas(), func(s *pb.PNSlot) counter.PNSlot {
			return counter.PNSlot{Replica: s.GetReplica(), P: s.GetP(), N: s.GetN()}
		}),
		StdError: p.GetStdError(), Precision: u8(d, p.GetPrecision(), "precision"),
		Fields: decodeEach(p.GetFields(), goField), Window: goWindow(p.GetWindow()),
		Buckets: decodeEach(p.GetBuckets(), func(b *pb.Bucket) counter.Bucket {
			return counter.Bucket{Start: goTime(b.GetStart()), Count: b.GetCount()}
		}),
	}
}

// State carries its data (an HLL sketch, pn slots...) as bytes.
func pbState(s *State) *pb.State {
	return &pb.State{Id: s.ID, Kind: pb.Kind(s.Kind), Version: s.Version, UpdatedAtUnixNs: s.UpdatedAt,
		ExpiresAtUnixNs: s.ExpiresAt, Deleted: s.Deleted, Data: s.Data}
}

func (d *decoder) state(p *pb.State) State {
	return State{ID: p.GetId(), Kind: contract.Kind(u8(d, p.GetKind(), "kind")), Version: p.GetVersion(),
		UpdatedAt: p.GetUpdatedAtUnixNs(), ExpiresAt: p.GetExpiresAtUnixNs(), Deleted: p.GetDeleted(), Data: orNil(p.GetData())}
}

func pbIdem(r *idemRecord) *pb.IdemRecord {
	p := &pb.IdemRecord{Key: []byte(r.Key), Fp: r.FP, CreatedUnixNs: r.Created, Pending: r.Pending, Claim: r.Claim,
		Ids: r.IDs, Results: encodeEach(r.Results, pbResult), Origin: r.Origin, Undo: encodeEach(r.Undo, pbOp)}
	if len(r.Wrote) > 0 {
		p.Wrote = make(map[string]*pb.Versions, len(r.Wrote))
		for id, ws := range r.Wrote {
			p.Wrote[id] = &pb.Versions{Versions: ws}
		}
	}
	return p
}

func (d *decoder) idem(p *pb.IdemRecord) idemRecord {
	r := idemRecord{
		IdemRecord: engine.IdemRecord{Key: string(p.GetKey()), FP: p.GetFp(), Created: p.GetCreatedUnixNs(), Pending: p.GetPending(),
			Claim: p.GetClaim(), IDs: orNil(p.GetIds()), Results: decodeEach(p.GetResults(), d.result)},
		Origin: p.GetOrigin(), Undo: decodeEach(p.GetUndo(), d.op),
	}
	if len(p.GetWrote()) > 0 {
		r.Wrote = make(map[string][]uint64, len(p.GetWrote()))
		for id, vs := range p.GetWrote() {
			r.Wrote[id] = orNil(vs.GetVersions())
		}
	}
	return r
}

// Rollup types.

func pbSeries(s *wireSeries) *pb.Series {
	if s == nil {
		return nil
	}
	return &pb.Series{Granularity: pb.Granularity(s.Granularity), Source: pb.Granularity(s.Source),
		From: pbTime(s.From), To: pbTime(s.To), Values: s.Values, Total: s.Total}
}

func (d *decoder) series(p *pb.Series) *wireSeries {
	if p == nil {
		return nil
	}
	return &wireSeries{Granularity: rollup.Granularity(u8(d, p.GetGranularity(), "granularity")),
		Source: rollup.Granularity(u8(d, p.GetSource(), "granularity")),
		From:   goTime(p.GetFrom()), To: goTime(p.GetTo()), Values: orNil(p.GetValues()), Total: p.GetTotal()}
}

func pbEstimate(e *rollup.Estimate) *pb.Estimate {
	if e == nil {
		return nil
	}
	return &pb.Estimate{Unit: pb.Granularity(e.Unit), N: int64(e.N), From: pbTime(e.From), To: pbTime(e.To),
		Value: e.Value, StdError: e.StdError, Precision: uint32(e.Precision), Merged: int64(e.Merged)}
}

func (d *decoder) estimate(p *pb.Estimate) *rollup.Estimate {
	if p == nil {
		return nil
	}
	return &rollup.Estimate{Unit: rollup.Granularity(u8(d, p.GetUnit(), "granularity")), N: int(p.GetN()),
		From: goTime(p.GetFrom()), To: goTime(p.GetTo()), Value: p.GetValue(), StdError: p.GetStdError(),
		Precision: u8(d, p.GetPrecision(), "precision"), Merged: int(p.GetMerged())}
}

func pbSpec(s *rollup.Spec) *pb.RollupSpec {
	if *s == (rollup.Spec{}) {
		return nil
	}
	return &pb.RollupSpec{MinuteNs: int64(s.Minute), HourNs: int64(s.Hour), DayNs: int64(s.Day), MonthNs: int64(s.Month),
		UniqueHoursNs: int64(s.UniqueHours), UniqueDaysNs: int64(s.UniqueDays), Precision: uint32(s.Precision)}
}

func (d *decoder) spec(p *pb.RollupSpec) rollup.Spec {
	return rollup.Spec{Minute: time.Duration(p.GetMinuteNs()), Hour: time.Duration(p.GetHourNs()),
		Day: time.Duration(p.GetDayNs()), Month: time.Duration(p.GetMonthNs()),
		UniqueHours: time.Duration(p.GetUniqueHoursNs()), UniqueDays: time.Duration(p.GetUniqueDaysNs()),
		Precision: u8(d, p.GetPrecision(), "precision")}
}

// Rate-limit types.

func pbLimit(l *ratelimit.Limit) *pb.Limit {
	return &pb.Limit{Name: []byte(l.Name), Algorithm: pb.Algorithm(l.Algorithm), Limit: l.Limit, PeriodNs: int64(l.Period), Burst: l.Burst,
		Scope: uint32(l.Scope)}
}

func (d *decoder) limit(p *pb.Limit) ratelimit.Limit {
	return ratelimit.Limit{Name: string(p.GetName()), Algorithm: ratelimit.Algorithm(u8(d, p.GetAlgorithm(), "algorithm")),
		Limit: p.GetLimit(), Period: time.Duration(p.GetPeriodNs()), Burst: p.GetBurst(), Scope: ratelimit.Scope(u8(d, p.GetScope(), "scope"))}
}

func pbEntry(e *ratelimit.Entry) *pb.LimitEntry {
	return &pb.LimitEntry{Key: []byte(e.Key), Limit: pbLimit(&e.Limit), State: e.State[:],
		Log: encodeEach(e.Log, func(h *[2]int64) *pb.LogHit { return &pb.LogHit{AtUnixNs: h[0], Units: h[1]} })}
}

func (d *decoder) entry(p *pb.LimitEntry) ratelimit.Entry {
	e := ratelimit.Entry{Key: string(p.GetKey()), Limit: d.limit(p.GetLimit()),
		Log: decodeEach(p.GetLog(), func(h *pb.LogHit) [2]int64 { return [2]int64{h.GetAtUnixNs(), h.GetUnits()} })}
	if len(p.GetState()) != len(e.State) {
		d.fail("rate-limit state of %d values, want %d", len(p.GetState()), len(e.State))
	} else {
		copy(e.State[:], p.GetState())
	}
	return e
}

func pbPolicyRecord(r *ratelimit.PolicyRecord) *pb.PolicyRecord {
	out := &pb.PolicyRecord{Name: r.Name, Order: r.Order, Stamp: r.Stamp, Node: r.Node}
	if p := r.Policy; p != nil {
		out.Policy = &pb.Policy{Name: p.Name, Match: []byte(p.Match), Namespace: []byte(p.Namespace), Algorithm: pb.Algorithm(p.Algorithm),
			Limit: p.Limit, PeriodNs: int64(p.Period), Burst: p.Burst, Cost: p.Cost, Final: p.Final, Scope: uint32(p.Scope)}
	}
	return out
}

func (d *decoder) policyRecord(p *pb.PolicyRecord) ratelimit.PolicyRecord {
	r := ratelimit.PolicyRecord{Name: p.GetName(), Order: p.GetOrder(), Stamp: p.GetStamp(), Node: p.GetNode()}
	if q := p.GetPolicy(); q != nil {
		r.Policy = &ratelimit.Policy{Name: q.GetName(), Match: string(q.GetMatch()), Namespace: string(q.GetNamespace()),
			Algorithm: ratelimit.Algorithm(u8(d, q.GetAlgorithm(), "algorithm")), Limit: q.GetLimit(),
			Period: time.Duration(q.GetPeriodNs()), Burst: q.GetBurst(), Cost: q.GetCost(), Final: q.GetFinal(),
			Scope: ratelimit.Scope(u8(d, q.GetScope(), "scope"))}
	}
	return r
}

// Requests and responses.

func pbApplyRequest(r *applyRequest) *pb.ApplyRequest {
	return &pb.ApplyRequest{Header: pbHeader(&r.header), Ops: encodeEach(r.Ops, pbOp), Batch: r.Batch,
		Durability: pb.Durability(r.Durability), IdemKey: []byte(r.IdemKey)}
}

func (d *decoder) applyRequest(p *pb.ApplyRequest) applyRequest {
	return applyRequest{header: goHeader(p.GetHeader()), Ops: decodeEach(p.GetOps(), d.op), Batch: p.GetBatch(),
		Durability: contract.Durability(u8(d, p.GetDurability(), "durability")), IdemKey: string(p.GetIdemKey())}
}

// A wireResult's replayed flag is the Result's: serveApply sets both.
func pbApplyResponse(r *applyResponse) *pb.ApplyResponse {
	return &pb.ApplyResponse{Err: pbError(r.Err), Results: encodeEach(r.Results, func(w *wireResult) *pb.Result {
		p := pbResult(&w.Result)
		p.Replayed = w.Replayed
		return p
	})}
}

func (d *decoder) applyResponse(p *pb.ApplyResponse) applyResponse {
	return applyResponse{Err: goError(p.GetErr()), Results: decodeEach(p.GetResults(), func(r *pb.Result) wireResult {
		res := d.result(r)
		return wireResult{Result: res, Replayed: res.Replayed}
	})}
}

func pbReadRequest(r *readRequest) (*pb.ReadRequest, error) {
	op, err := opValue(pb.ReadOp_value, "READ_OP_", r.Op)
	return &pb.ReadRequest{Header: pbHeader(&r.header), Op: pb.ReadOp(op), Id: r.ID, Ids: r.IDs, Field: []byte(r.Field),
		G: pb.Granularity(r.G), From: pbTime(r.From), To: pbTime(r.To), N: int64(r.N), AnyReplica: r.AnyReplica}, err
}

func (d *decoder) readRequest(p *pb.ReadRequest) readRequest {
	return readRequest{header: goHeader(p.GetHeader()), Op: opName(pb.ReadOp_name, "READ_OP_", int32(p.GetOp())),
		ID: p.GetId(), IDs: orNil(p.GetIds()), Field: string(p.GetField()), G: rollup.Granularity(u8(d, p.GetG(), "granularity")),
		From: goTime(p.GetFrom()), To: goTime(p.GetTo()), N: int(p.GetN()), AnyReplica: p.GetAnyReplica()}
}

func pbReadResponse(r *readResponse) *pb.ReadResponse {
	return &pb.ReadResponse{View: pbView(r.View), IntValue: r.Int, UintValue: r.Uint, FloatValue: r.Float, Ok: r.OK,
		Exists: r.Exists, DurationNs: int64(r.Duration), Series: pbSeries(r.Series), Estimate: pbEstimate(r.Estimate),
		Err: pbError(r.Err), Kind: pb.Kind(r.Kind)}
}

func (d *decoder) readResponse(p *pb.ReadResponse) readResponse {
	return readResponse{View: d.view(p.GetView()), Int: p.GetIntValue(), Uint: p.GetUintValue(), Float: p.GetFloatValue(),
		OK: p.GetOk(), Exists: p.GetExists(), Duration: time.Duration(p.GetDurationNs()), Series: d.series(p.GetSeries()),
		Estimate: d.estimate(p.GetEstimate()), Err: goError(p.GetErr()), Kind: contract.Kind(u8(d, p.GetKind(), "kind"))}
}

func pbLocalRequest(r *localRequest) (*pb.LocalRequest, error) {
	op, err := opValue(pb.LocalOp_value, "LOCAL_OP_", r.Op)
	out := &pb.LocalRequest{Header: pbHeader(&r.header), Op: pb.LocalOp(op), Prefix: []byte(r.Prefix), Cursor: r.Cursor,
		Match: []byte(r.Match), Count: int64(r.Count), Key: r.Key, Spec: pbSpec(&r.Spec), Durability: pb.Durability(r.Durability)}
	if v := r.View; v != nil {
		out.View = &pb.ViewRequest{Nodes: v.Nodes, Down: v.Down}
	}
	if q := r.SeriesOf; q != nil {
		out.SeriesOf = &pb.SeriesQuery{Id: q.ID, G: pb.Granularity(q.G), From: pbTime(q.From), To: pbTime(q.To)}
	}
	if m := r.Mark; m != nil {
		out.Mark = &pb.HandoffMark{Nodes: m.Nodes, Incarnation: m.Incarnation, Version: m.Version}
	}
	return out, err
}

func (d *decoder) localRequest(p *pb.LocalRequest) localRequest {
	r := localRequest{header: goHeader(p.GetHeader()), Op: opName(pb.LocalOp_name, "LOCAL_OP_", int32(p.GetOp())),
		Prefix: string(p.GetPrefix()), Cursor: p.GetCursor(), Match: string(p.GetMatch()), Count: int(p.GetCount()), Key: p.GetKey(),
		Spec: d.spec(p.GetSpec()), Durability: contract.Durability(u8(d, p.GetDurability(), "durability"))}
	if v := p.GetView(); v != nil {
		r.View = &viewRequest{Nodes: orNil(v.GetNodes()), Down: orNil(v.GetDown())}
	}
	if q := p.GetSeriesOf(); q != nil {
		r.SeriesOf = &seriesQuery{ID: q.GetId(), G: rollup.Granularity(u8(d, q.GetG(), "granularity")),
			From: goTime(q.GetFrom()), To: goTime(q.GetTo())}
	}
	if m := p.GetMark(); m != nil {
		r.Mark = &handoffMark{Nodes: m.GetNodes(), Incarnation: m.GetIncarnation(), Version: m.GetVersion()}
	}
	return r
}

func pbLocalResponse(r *localResponse) *pb.LocalResponse {
	out := &pb.LocalResponse{Ids: r.IDs, Next: r.Next, N: int64(r.N), Ok: r.OK, Err: pbError(r.Err), Series: pbSeries(r.Series)}
	if a := r.Aggregate; a != (contract.Aggregate{}) {
		out.Aggregate = &pb.Aggregate{Prefix: []byte(a.Prefix), Value: a.Value, Count: int64(a.Count)}
	}
	if v := r.View; v != nil {
		out.View = &pb.ViewAnswer{Incarnation: v.Incarnation, Version: v.Version, HandedOff: v.HandedOff}
	}
	if m := r.Mark; m != nil {
		out.Mark = &pb.HandoffMark{Nodes: m.Nodes, Incarnation: m.Incarnation, Version: m.Version}
	}
	return out
}

func (d *decoder) localResponse(p *pb.LocalResponse) localResponse {
	a := p.GetAggregate()
	r := localResponse{Aggregate: contract.Aggregate{Prefix: string(a.GetPrefix()), Value: a.GetValue(), Count: int(a.GetCount())},
		IDs: orNil(p.GetIds()), Next: p.GetNext(), N: int(p.GetN()), OK: p.GetOk(), Err: goError(p.GetErr()),
		Series: d.series(p.GetSeries())}
	if v := p.GetView(); v != nil {
		r.View = &viewAnswer{Incarnation: v.GetIncarnation(), Version: v.GetVersion(), HandedOff: v.GetHandedOff()}
	}
	if m := p.GetMark(); m != nil {
		r.Mark = &handoffMark{Nodes: m.GetNodes(), Incarnation: m.GetIncarnation(), Version: m.GetVersion()}
	}
	return r
}

func pbReplicateRequest(r *replicateRequest) *pb.ReplicateRequest {
	return &pb.ReplicateRequest{Header: pbHeader(&r.header), States: encodeEach(r.States, pbState), Sync: r.Sync,
		Idem: encodeEach(r.Idem, pbIdem), Marks: encodeEach(r.Marks, pbMarkGroup)}
}

func (d *decoder) replicateRequest(p *pb.ReplicateRequest) replicateRequest {
	return replicateRequest{header: goHeader(p.GetHeader()), States: decodeEach(p.GetStates(), d.state), Sync: p.GetSync(),
		Idem: decodeEach(p.GetIdem(), d.idem), Marks: decodeEach(p.GetMarks(), d.markGroup)}
}

func pbReplicateResponse(r *replicateResponse) *pb.ReplicateResponse {
	return &pb.ReplicateResponse{Changed: int64(r.Changed), Err: pbError(r.Err), Stale: r.Stale}
}

func (d *decoder) replicateResponse(p *pb.ReplicateResponse) replicateResponse {
	return replicateResponse{Changed: int(p.GetChanged()), Err: goError(p.GetErr()), Stale: orNil(p.GetStale())}
}

func pbFetchRequest(r *fetchRequest) *pb.FetchRequest {
	return &pb.FetchRequest{Header: pbHeader(&r.header), Ids: r.IDs, Claims: r.Claims, IdemKey: []byte(r.IdemKey), IdemFp: r.IdemFP}
}

func (d *decoder) fetchRequest(p *pb.FetchRequest) fetchRequest {
	return fetchRequest{header: goHeader(p.GetHeader()), IDs: orNil(p.GetIds()), Claims: orNil(p.GetClaims()),
		IdemKey: string(p.GetIdemKey()), IdemFP: p.GetIdemFp()}
}

func pbFetchResponse(r *fetchResponse) *pb.FetchResponse {
	return &pb.FetchResponse{States: encodeEach(r.States, pbState), Nodes: r.Nodes, Idem: encodeEach(r.Idem, pbIdem),
		Err: pbError(r.Err), Refused: r.Refused, Marks: encodeEach(r.Marks, pbMarkGroup)}
}

func (d *decoder) fetchResponse(p *pb.FetchResponse) fetchResponse {
	return fetchResponse{States: decodeEach(p.GetStates(), d.state), Nodes: p.GetNodes(),
		Idem: decodeEach(p.GetIdem(), d.idem), Err: goError(p.GetErr()), Refused: orNil(p.GetRefused()),
		Marks: decodeEach(p.GetMarks(), d.markGroup)}
}

func pbDigestRequest(r *digestRequest) *pb.DigestRequest {
	return &pb.DigestRequest{Header: pbHeader(&r.header), Items: encodeEach(r.Items, func(it *digestItem) *pb.DigestItem {
		return &pb.DigestItem{Id: it.ID, Version: it.Version, Sum: it.Sum}
	})}
}

func (d *decoder) digestRequest(p *pb.DigestRequest) digestRequest {
	return digestRequest{header: goHeader(p.GetHeader()), Items: decodeEach(p.GetItems(), func(it *pb.DigestItem) digestItem {
		return digestItem{ID: it.GetId(), Version: it.GetVersion(), Sum: it.GetSum()}
	})}
}

func pbDigestResponse(r *digestResponse) *pb.DigestResponse {
	return &pb.DigestResponse{Want: r.Want, States: encodeEach(r.States, pbState), Idem: encodeEach(r.Idem, pbIdem),
		Err: pbError(r.Err), Marks: encodeEach(r.Marks, pbMarkGroup)}
}

func (d *decoder) digestResponse(p *pb.DigestResponse) digestResponse {
	return digestResponse{Want: orNil(p.GetWant()), States: decodeEach(p.GetStates(), d.state),
		Idem: decodeEach(p.GetIdem(), d.idem), Err: goError(p.GetErr()), Marks: decodeEach(p.GetMarks(), d.markGroup)}
}

func pbLimitsRequest(r *limitsRequest) *pb.LimitsRequest {
	return &pb.LimitsRequest{Header: pbHeader(&r.header), Entries: encodeEach(r.Entries, pbEntry), Handoff: r.Handoff}
}

func (d *decoder) limitsRequest(p *pb.LimitsRequest) limitsRequest {
	return limitsRequest{header: goHeader(p.GetHeader()), Entries: decodeEach(p.GetEntries(), d.entry), Handoff: p.GetHandoff()}
}

func pbLimitsResponse(r *limitsResponse) *pb.LimitsResponse {
	return &pb.LimitsResponse{Merged: int64(r.Merged), Err: pbError(r.Err)}
}

func (d *decoder) limitsResponse(p *pb.LimitsResponse) limitsResponse {
	return limitsResponse{Merged: int(p.GetMerged()), Err: goError(p.GetErr())}
}

func pbPoliciesRequest(r *policiesRequest) *pb.PoliciesRequest {
	return &pb.PoliciesRequest{Header: pbHeader(&r.header), Records: encodeEach(r.Records, pbPolicyRecord)}
}

func (d *decoder) policiesRequest(p *pb.PoliciesRequest) policiesRequest {
	return policiesRequest{header: goHeader(p.GetHeader()), Records: decodeEach(p.GetRecords(), d.policyRecord)}
}

func pbPoliciesResponse(r *policiesResponse) *pb.PoliciesResponse {
	return &pb.PoliciesResponse{Records: encodeEach(r.Records, pbPolicyRecord), Err: pbError(r.Err)}
}

func (d *decoder) policiesResponse(p *pb.PoliciesResponse) policiesResponse {
	return policiesResponse{Records: decodeEach(p.GetRecords(), d.policyRecord), Err: goError(p.GetErr())}
}

func pbGlobalRequest(r *globalRequest) *pb.GlobalLimitsRequest {
	return &pb.GlobalLimitsRequest{Header: pbHeader(&r.header), Reports: encodeEach(r.Reports, func(g *ratelimit.GlobalReport) *pb.GlobalReport {
		return &pb.GlobalReport{Key: []byte(g.Key), Limit: pbLimit(&g.Limit), Window: g.Window, Used: g.Used, Demand: g.Demand}
	})}
}

func (d *decoder) globalRequest(p *pb.GlobalLimitsRequest) globalRequest {
	return globalRequest{header: goHeader(p.GetHeader()), Reports: decodeEach(p.GetReports(), func(g *pb.GlobalReport) ratelimit.GlobalReport {
		return ratelimit.GlobalReport{Key: string(g.GetKey()), Limit: d.limit(g.GetLimit()), Window: g.GetWindow(), Used: g.GetUsed(), Demand: g.GetDemand()}
	})}
}

func pbGlobalResponse(r *globalResponse) *pb.GlobalLimitsResponse {
	return &pb.GlobalLimitsResponse{Shares: encodeEach(r.Shares, func(g *ratelimit.GlobalShare) *pb.GlobalShare {
		return &pb.GlobalShare{Key: []byte(g.Key), Limit: pbLimit(&g.Limit), Window: g.Window, Share: g.Share, Next: g.Next}
	}), Err: pbError(r.Err)}
}

func (d *decoder) globalResponse(p *pb.GlobalLimitsResponse) globalResponse {
	return globalResponse{Shares: decodeEach(p.GetShares(), func(g *pb.GlobalShare) ratelimit.GlobalShare {
		return ratelimit.GlobalShare{Key: string(g.GetKey()), Limit: d.limit(g.GetLimit()), Window: g.GetWindow(), Share: g.GetShare(), Next: g.GetNext()}
	}), Err: goError(p.GetErr())}
}

// Dedupe marks (marks.go, marked.go).

func bytesList(ss []string) [][]byte {
	if len(ss) == 0 {
		return nil
	}
	out := make([][]byte, len(ss))
	for i := range ss {
		out[i] = []byte(ss[i])
	}
	return out
}

func stringList(bs [][]byte) []string {
	if len(bs) == 0 {
		return nil
	}
	out := make([]string, len(bs))
	for i := range bs {
		out[i] = string(bs[i])
	}
	return out
}

func pbMarkGroup(g *markGroup) *pb.MarkGroup {
	return &pb.MarkGroup{Id: g.ID, Key: g.Key, Wrote: g.Wrote, ExpiresUnixNs: g.Expires, Events: bytesList(g.Events)}
}

func (d *decoder) markGroup(p *pb.MarkGroup) markGroup {
	// (merge keeps the highest maxWrote versions)
	return markGroup{ID: p.GetId(), Key: p.GetKey(), Wrote: orNil(p.GetWrote()), Expires: p.GetExpiresUnixNs(), Events: stringList(p.GetEvents())}
}

func pbMarkedRequest(r *markedRequest) *pb.ApplyMarkedRequest {
	return &pb.ApplyMarkedRequest{Header: pbHeader(&r.header), Durability: pb.Durability(r.Durability), TtlNs: int64(r.TTL),
		Ops: encodeEach(r.Ops, func(o *contract.MarkedOp) *pb.MarkedOp {
			return &pb.MarkedOp{Op: pbOp(&o.Op), Marks: bytesList(o.Marks)}
		})}
}

func (d *decoder) markedRequest(p *pb.ApplyMarkedRequest) markedRequest {
	return markedRequest{header: goHeader(p.GetHeader()), Durability: contract.Durability(u8(d, p.GetDurability(), "durability")),
		TTL: time.Duration(p.GetTtlNs()), Ops: decodeEach(p.GetOps(), func(o *pb.MarkedOp) contract.MarkedOp {
			return contract.MarkedOp{Op: d.op(o.GetOp()), Marks: stringList(o.GetMarks())}
		})}
}

// A seen list is never nil on the wire side: an op answered with no
// marks was applied.
func pbMarkedResponse(r *markedResponse) *pb.ApplyMarkedResponse {
	return &pb.ApplyMarkedResponse{Err: pbError(r.Err), Seen: encodeEach(r.Seen, func(s *[]string) *pb.Seen {
		return &pb.Seen{Marks: bytesList(*s)}
	})}
}

func (d *decoder) markedResponse(p *pb.ApplyMarkedResponse) markedResponse {
	return markedResponse{Err: goError(p.GetErr()), Seen: decodeEach(p.GetSeen(), func(s *pb.Seen) []string { return stringList(s.GetMarks()) })}
}
