package ratelimitapi

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	rls "github.com/counterd/counterd/api/counterd/envoyrls/v3"
	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/ratelimit"
)

// EnvoyOptions configure RegisterEnvoy. The zero value is valid.
type EnvoyOptions struct {
	// OverrideAlgorithm is the algorithm of limits a descriptor carries
	// itself (RateLimitDescriptor.limit). Default FixedWindow, which is
	// how Envoy's reference rate limit service counts.
	OverrideAlgorithm ratelimit.Algorithm
	// NoHeaders leaves response_headers_to_add empty. Default false: the
	// answer asks Envoy to add the RateLimit, RateLimit-Policy,
	// X-RateLimit-* (and, over the limit, Retry-After) headers.
	NoHeaders bool
	// Authorize, when set, is called with every request's limits before
	// anything is charged; an error refuses the whole request (wrap
	// auth.ErrForbidden for PERMISSION_DENIED). Default nil: no check.
	Authorize func(ctx context.Context, hits []ratelimit.Hit) error
}

// RegisterEnvoy registers Envoy's rate limit service v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on s,
// deciding with c (a *Limiter, or a *Router in a cluster; policies are
// c.Local()'s). Each descriptor of a request is a key,
// DescriptorKey(domain, entries), checked against the limit the
// descriptor carries or else the policies matching the key (none: the
// descriptor is not limited, code OK). All descriptors of one request
// are checked atomically: if one is over its limit, none is charged.
// Hits are the descriptor's hits_addend, else the request's, else 1.
func RegisterEnvoy(s grpc.ServiceRegistrar, c ratelimit.Checker, opts EnvoyOptions) {
	if opts.OverrideAlgorithm == 0 {
		opts.OverrideAlgorithm = ratelimit.FixedWindow
	}
	s.RegisterService(&envoyServiceDesc, &envoyServer{c: c, l: c.Local(), opts: opts})
}

// envoyMethod is ShouldRateLimit's gRPC method name.
const envoyMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// envoyServiceDesc is what go-control-plane's generated
// RateLimitService_ServiceDesc says, over counterd's copies of the
// messages (api/counterd/envoyrls/v3/rls.proto: the same wire format,
// without linking go-control-plane's generated packages).
var envoyServiceDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*interface {
		ShouldRateLimit(context.Context, *rls.RateLimitRequest) (*rls.RateLimitResponse, error)
	})(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(rls.RateLimitRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			s := srv.(*envoyServer)
			if interceptor == nil {
				return s.ShouldRateLimit(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: envoyMethod}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return s.ShouldRateLimit(ctx, req.(*rls.RateLimitRequest))
			})
		},
	}},
	Streams:  []grpc.StreamDesc{},
	Metadata: "envoy/service/ratelimit/v3/rls.proto",
}

// DescriptorKey is the key of a descriptor: the domain, ':', then the
// entries as key=value joined by '/', such as
// "edge:remote_address=10.0.0.1/path=/api". Policies match it with globs
// such as "edge:remote_address=*" or by namespace (the domain).
func DescriptorKey(domain string, entries []*rls.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	n := len(domain) + 1
	for _, e := range entries {
		n += len(e.GetKey()) + len(e.GetValue()) + 2
	}
	b.Grow(n)
	b.WriteString(domain)
	b.WriteByte(':')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(e.GetKey())
		b.WriteByte('=')
		b.WriteString(e.GetValue())
	}
	return b.String()
}

type envoyServer struct {
	c    ratelimit.Checker
	l    *ratelimit.Limiter // c.Local()
	opts EnvoyOptions
}

func (s *envoyServer) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	domain := req.GetDomain()
	descs := req.GetDescriptors()
	if domain == "" || len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ratelimit: domain and at least one descriptor are required")
	}
	addend := max(1, int64(req.GetHitsAddend()))
	hits := make([]ratelimit.Hit, 0, len(descs))
	spans := make([][2]int, len(descs))
	tooBig := make([]bool, len(descs)) // a hit above the limit's capacity can never pass
	anyTooBig := false
	for i, d := range descs {
		key := DescriptorKey(domain, d.GetEntries())
		cost := addend
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), ratelimit.MaxLimit+1))
		}
		start := len(hits)
		if o := d.GetLimit(); o != nil {
			lim := ratelimit.Limit{Name: "override", Algorithm: s.opts.OverrideAlgorithm, Limit: int64(o.GetRequestsPerUnit()), Period: unitPeriod(o.GetUnit())}
			if err := lim.Validate(); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			hits = append(hits, ratelimit.Hit{Key: key, Limit: lim, Cost: cost})
		} else {
			var err error
			hits, err = s.l.AppendPolicyHits(hits, key, nil, cost)
			if err != nil && !errors.Is(err, ratelimit.ErrNoPolicy) {
				return nil, grpcError(err)
			}
		}
		for j := start; j < len(hits); j++ {
			if hits[j].Cost > hits[j].Limit.Capacity() {
				tooBig[i], anyTooBig = true, true
			}
		}
		spans[i] = [2]int{start, len(hits)}
	}
	if len(hits) > ratelimit.MaxHits {
		return nil, status.Errorf(codes.InvalidArgument, "ratelimit: %d limits in one request, at most %d", len(hits), ratelimit.MaxHits)
	}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: make([]*rls.RateLimitResponse_DescriptorStatus, len(descs))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(ctx, hits); err != nil {
			return nil, grpcError(err)
		}
	}
	if len(hits) == 0 {
		return resp, nil
	}
	if anyTooBig {
		for i := range hits {
			hits[i].Cost = 0 // nothing may be charged: report the state only
		}
	}
	sts := make([]ratelimit.Status, len(hits))
	agg, err := s.c.CheckMultiContext(ctx, hits, sts)
	if err != nil {
		return nil, grpcError(err)
	}
	over := !agg.Allowed || anyTooBig
	for i, sp := range spans {
		if sp[0] == sp[1] {
			continue
		}
		st := ratelimit.Binding(sts[sp[0]:sp[1]])
		ds := resp.Statuses[i]
		lim := hits[sp[0]].Limit
		for j := sp[0]; j < sp[1]; j++ {
			if sts[j] == st {
				lim = hits[j].Limit
				break
			}
		}
		ds.CurrentLimit = &rls.RateLimitResponse_RateLimit{Name: lim.DisplayName(), RequestsPerUnit: uint32(min(lim.Limit, math.MaxUint32)), Unit: periodUnit(lim.Period)}
		ds.LimitRemaining = uint32(min(st.Remaining, math.MaxUint32))
		ds.DurationUntilReset = durationpb.New(window(st))
		if !st.Allowed || tooBig[i] {
			ds.Code = rls.RateLimitResponse_OVER_LIMIT
			if tooBig[i] {
				ds.LimitRemaining = 0
			}
		}
	}
	if over {
		resp.OverallCode = rls.RateLimitResponse_OVER_LIMIT
		agg.Allowed = false
		if agg.RetryAfter == 0 {
			agg.RetryAfter = agg.Reset
		}
	}
	if !s.opts.NoHeaders {
		appendHeaders(func(k, v string) {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &rls.HeaderValue{Key: k, Value: v})
		}, s.l.Now(), hits, sts, agg)
	}
	return resp, nil
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, ratelimit.ErrClosed), errors.Is(err, ratelimit.ErrFull), errors.Is(err, ratelimit.ErrOwnerUnavailable), errors.Is(err, ratelimit.ErrDeciderUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ratelimit.ErrInvalidKey), errors.Is(err, ratelimit.ErrInvalidLimit), errors.Is(err, ratelimit.ErrInvalidCost),
		errors.Is(err, ratelimit.ErrInvalidRequest), errors.Is(err, ratelimit.ErrTooManyLimits):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, auth.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, auth.ErrUnauthenticated), errors.Is(err, auth.ErrBadToken):
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// unitPeriod is the period of an Envoy rate limit unit (month: 30 days,
// year: 365 days); 0 for an unknown unit, which fails validation.
func unitPeriod(u rls.RateLimitUnit) time.Duration {
	switch u {
	case rls.RateLimitUnit_SECOND:
		return time.Second
	case rls.RateLimitUnit_MINUTE:
		return time.Minute
	case rls.RateLimitUnit_HOUR:
		return time.Hour
	case rls.RateLimitUnit_DAY:
		return 24 * time.Hour
	case rls.RateLimitUnit_MONTH:
		return 30 * 24 * time.Hour
	case rls.RateLimitUnit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}

func periodUnit(d time.Duration) rls.RateLimitResponse_RateLimit_Unit {
	switch d {
	case time.Second:
		return rls.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rls.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rls.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rls.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		return rls.RateLimitResponse_RateLimit_WEEK
	case 30 * 24 * time.Hour:
		return rls.RateLimitResponse_RateLimit_MONTH
	case 365 * 24 * time.Hour:
		return rls.RateLimitResponse_RateLimit_YEAR
	}
	return rls.RateLimitResponse_RateLimit_UNKNOWN
}
