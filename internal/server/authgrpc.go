package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/auth"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/region"
)

// grpcNeeds maps every client-facing gRPC method to its permission;
// TestGRPCNeedsCoverMethods checks that every registered method but the
// peer service's is here. A method missing from the table is refused.
var grpcNeeds = map[string]auth.Need{
	"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": needWrite, // each key checked by authorizeHits
}

// peerMethodPrefix is the peer service, authenticated by the cluster's
// transport (mTLS), not by client tokens.
const peerMethodPrefix = "/" + cnode.ServiceName + "/"

// regionMethodPrefix is the region service (peer regions' pushes and
// syncs), authenticated like the peer service.
const regionMethodPrefix = "/" + region.ServiceName + "/"

// grpcAuthOptions installs token authentication on a gRPC server; none
// without a store (no --auth).
func grpcAuthOptions(store *auth.Store) []grpc.ServerOption {
	if store == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := grpcAuthenticate(ctx, store, info.FullMethod)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := grpcAuthenticate(ss.Context(), store, info.FullMethod)
			if err != nil {
				return err
			}
			return h(srv, &authedStream{ss, ctx})
		}),
	}
}

// grpcAuthenticate checks the "authorization: Bearer <token>" metadata
// and the method's permission, and returns ctx carrying the principal.
func grpcAuthenticate(ctx context.Context, store *auth.Store, method string) (context.Context, error) {
	if strings.HasPrefix(method, peerMethodPrefix) || strings.HasPrefix(method, regionMethodPrefix) {
		return ctx, nil
	}
	need, ok := grpcNeeds[method]
	if !ok {
		store.Failed("grpc", auth.ReasonForbidden)
		return nil, status.Errorf(codes.PermissionDenied, "auth: no permission is defined for %s", method)
	}
	var tok string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			tok = auth.BearerToken(v[0])
		}
	}
	p, err := store.Authenticate("", []byte(tok))
	if err != nil {
		store.Failed("grpc", auth.ReasonOf(err))
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if !p.Allows(need) {
		store.Failed("grpc", auth.ReasonForbidden)
		return nil, status.Errorf(codes.PermissionDenied, "%v: user %q has no %s permission for %s", auth.ErrForbidden, p.User, need, method)
	}
	return auth.WithToken(auth.NewContext(ctx, p), tok), nil
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// grpcHitsAuthorizer is the Envoy rate-limit service's key check: that of
// HTTP, with a refusal counted for gRPC. nil without --auth.
func grpcHitsAuthorizer(store *auth.Store) func(context.Context, []ratelimit.Hit) error {
	if store == nil {
		return nil
	}
	return func(ctx context.Context, hits []ratelimit.Hit) error {
		err := authorizeHits(ctx, hits)
		if err != nil {
			store.Failed("grpc", auth.ReasonOf(err))
		}
		return err
	}
}
