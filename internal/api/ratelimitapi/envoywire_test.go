package ratelimitapi

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	rls "github.com/counterd/counterd/api/counterd/envoyrls/v3"
)

// The service decodes requests and encodes answers with counterd's copies
// of Envoy's messages (api/counterd/envoyrls/v3). These properties check
// the copies against go-control-plane's generated messages on random
// values of every field: Envoy's encoding decodes into the copy with no
// unknown field and encodes back to an equal message, and the same from
// the copy's side. The service tests call it with go-control-plane's
// client as well.

// noUnknown fails when m or a message in it holds fields its type does not
// know (a field the copy lacks, or one of another wire type).
func noUnknown(t *rapid.T, m protoreflect.Message) {
	if len(m.GetUnknown()) > 0 {
		t.Fatalf("%s: unknown fields %x", m.Descriptor().FullName(), m.GetUnknown())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				noUnknown(t, v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			noUnknown(t, v.Message())
		}
		return true
	})
}

func roundTrip(t *rapid.T, from, via, back proto.Message) {
	b, err := proto.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, via); err != nil {
		t.Fatalf("decode into %T: %v", via, err)
	}
	noUnknown(t, via.ProtoReflect())
	b2, err := proto.Marshal(via)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b2, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(from, back) {
		t.Fatalf("%T -> %T -> %T changed the message:\n%v\n%v", from, via, back, from, back)
	}
}

func drawString(t *rapid.T, label string) string {
	return rapid.StringN(0, 12, -1).Draw(t, label)
}

func TestEnvoyRequestWire(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		req := &rlsv3.RateLimitRequest{Domain: drawString(t, "domain"), HitsAddend: rapid.Uint32().Draw(t, "addend")}
		for range rapid.IntRange(0, 4).Draw(t, "descs") {
			d := &rlcommonv3.RateLimitDescriptor{}
			for range rapid.IntRange(0, 3).Draw(t, "entries") {
				d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: drawString(t, "k"), Value: drawString(t, "v")})
			}
			if rapid.Bool().Draw(t, "limit") {
				d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rapid.Uint32().Draw(t, "rpu"),
					Unit: typev3.RateLimitUnit(rapid.Int32Range(0, 7).Draw(t, "unit"))}
			}
			if rapid.Bool().Draw(t, "hits") {
				d.HitsAddend = wrapperspb.UInt64(rapid.Uint64().Draw(t, "h"))
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		roundTrip(t, req, &rls.RateLimitRequest{}, &rlsv3.RateLimitRequest{})
	})
}

func TestEnvoyResponseWire(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		quota := func(label string) *rls.RateLimitResponse_Quota {
			if !rapid.Bool().Draw(t, label) {
				return nil
			}
			q := &rls.RateLimitResponse_Quota{Requests: rapid.Uint32().Draw(t, label+"r"), Id: drawString(t, label+"id")}
			if rapid.Bool().Draw(t, label+"vu") {
				q.ExpirationSpecifier = &rls.RateLimitResponse_Quota_ValidUntil{ValidUntil: timestamppb.New(time.Unix(rapid.Int64Range(0, 1<<40).Draw(t, label+"ts"), 0))}
			}
			return q
		}
		headers := func(label string) []*rls.HeaderValue {
			var hs []*rls.HeaderValue
			for range rapid.IntRange(0, 3).Draw(t, label) {
				hs = append(hs, &rls.HeaderValue{Key: drawString(t, label+"k"), Value: drawString(t, label+"v"),
					RawValue: rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, label+"raw")})
			}
			return hs
		}
		resp := &rls.RateLimitResponse{
			OverallCode:          rls.RateLimitResponse_Code(rapid.Int32Range(0, 2).Draw(t, "code")),
			ResponseHeadersToAdd: headers("resp"),
			RequestHeadersToAdd:  headers("req"),
			RawBody:              rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "body"),
			Quota:                quota("quota"),
		}
		if rapid.Bool().Draw(t, "meta") {
			resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{drawString(t, "mk"): drawString(t, "mv")})
		}
		for range rapid.IntRange(0, 3).Draw(t, "statuses") {
			st := &rls.RateLimitResponse_DescriptorStatus{
				Code:           rls.RateLimitResponse_Code(rapid.Int32Range(0, 2).Draw(t, "scode")),
				LimitRemaining: rapid.Uint32().Draw(t, "rem"),
				Quota:          quota("squota"),
			}
			if rapid.Bool().Draw(t, "cur") {
				st.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: drawString(t, "name"), RequestsPerUnit: rapid.Uint32().Draw(t, "rpu"),
					Unit: rls.RateLimitResponse_RateLimit_Unit(rapid.Int32Range(0, 7).Draw(t, "unit"))}
			}
			if rapid.Bool().Draw(t, "reset") {
				st.DurationUntilReset = durationpb.New(time.Duration(rapid.Int64Range(0, 1<<40).Draw(t, "d")))
			}
			resp.Statuses = append(resp.Statuses, st)
		}
		// The copy's answer as Envoy decodes it, and back.
		roundTrip(t, resp, &rlsv3.RateLimitResponse{}, &rls.RateLimitResponse{})
		// HeaderValue alone, as envoy.config.core.v3 has it.
		for _, h := range resp.ResponseHeadersToAdd {
			roundTrip(t, h, &corev3.HeaderValue{}, &rls.HeaderValue{})
		}
	})
}
