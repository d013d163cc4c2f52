package region

import (
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/tlsconfig"
)

// ServiceName is the gRPC service regions call each other on, served on
// --grpc beside the others. Its messages are google.protobuf.BytesValue
// carrying this package's encodings (wire.go), so it needs no generated
// code:
//
//	Push(batch)                  -> empty: the batch is durable in the copy
//	Manifest(name)               -> incarnation (uvarint) + manifest blob of
//	                                the state named name (this region's own
//	                                or its copy of a peer's)
//	Fetch(name + hash)           -> a blob of one of the last two manifests
//
// Like the cluster's peer service it is authenticated by the transport
// (a peer certificate with --peer-ca), not by client tokens. With
// Config.AuthorizePeers every call needs a verified client certificate
// naming a peer region (tlsconfig.CertRegions): a push is accepted only
// from the region it claims to come from, and a manifest or fetch only of
// this region's own state or the caller's (the copy a bootstrap pulls).
const ServiceName = "counterd.region.v1.Region"

// maxFetch bounds a fetched blob (a chunk of MaxChunkKeys dense HLLs).
const maxFetch = 64 << 20

// Register serves the region service of r on s.
func (r *Replicator) Register(s *grpc.Server) {
	s.RegisterService(&serviceDesc, r)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Push", Handler: handler("Push", func(r *Replicator, ctx context.Context, c caller, in []byte) ([]byte, error) {
			return nil, r.receive(ctx, c, in)
		})},
		{MethodName: "Manifest", Handler: handler("Manifest", func(r *Replicator, ctx context.Context, c caller, in []byte) ([]byte, error) {
			name, h, err := decodeFetch(in)
			if err == nil && h != nil {
				err = fmt.Errorf("%w: manifest request with a hash", ErrCorrupt)
			}
			if err == nil {
				err = r.mayRead(c, name)
			}
			if err != nil {
				return nil, err
			}
			m, err := r.manifest(ctx, name)
			if err != nil {
				return nil, err
			}
			return append(binary.AppendUvarint(nil, r.incarnation), m...), nil
		})},
		{MethodName: "Fetch", Handler: handler("Fetch", func(r *Replicator, _ context.Context, c caller, in []byte) ([]byte, error) {
			name, h, err := decodeFetch(in)
			if err == nil && h == nil {
				err = fmt.Errorf("%w: fetch without a hash", ErrCorrupt)
			}
			if err == nil {
				err = r.mayRead(c, name)
			}
			if err != nil {
				return nil, err
			}
			return r.blob(name, *h)
		})},
	},
	Metadata: "internal/region/service.go",
}

func handler(method string, fn func(*Replicator, context.Context, caller, []byte) ([]byte, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	full := "/" + ServiceName + "/" + method
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			r := srv.(*Replicator)
			c, err := r.callerOf(ctx)
			if err != nil {
				return nil, toStatus(err)
			}
			ctx, done, err := r.serving(ctx)
			if err != nil {
				return nil, toStatus(err)
			}
			defer done()
			if testHookServe != nil {
				testHookServe(ctx, method)
			}
			out, err := fn(r, ctx, c, req.(*wrapperspb.BytesValue).GetValue())
			if err != nil && r.serveCtx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrStopping, err) // cancelled by StopServing
			}
			if err != nil {
				return nil, toStatus(err)
			}
			return wrapperspb.Bytes(out), nil
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
	}
}

// testHookServe, set by tests only, runs at the start of every incoming
// call (a call stuck on a slow disk or a lock).
var testHookServe func(ctx context.Context, method string)

// ErrNotAllowed: a region call whose client certificate does not name the
// region it acts as (gRPC PermissionDenied).
var ErrNotAllowed = errors.New("region: not allowed")

// errNoPeerCert: a region call without a verified client certificate
// (gRPC Unauthenticated).
var errNoPeerCert = errors.New("region: calls need a client certificate signed by --peer-ca")

// caller is who makes an incoming region call: any region (AuthorizePeers
// off), or the peer regions its certificate names.
type caller struct {
	any     bool
	regions []string
}

// is reports whether c may act as region name.
func (c caller) is(name string) bool { return c.any || slices.Contains(c.regions, name) }

// callerOf identifies the client of an incoming call: with AuthorizePeers,
// the configured peer regions its verified certificate names (at least
// one, or the call is refused).
func (r *Replicator) callerOf(ctx context.Context) (caller, error) {
	if !r.cfg.AuthorizePeers {
		return caller{any: true}, nil
	}
	var leaf *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			leaf = tlsconfig.PeerLeaf(&ti.State)
		}
	}
	if leaf == nil {
		return caller{}, errNoPeerCert
	}
	var c caller
	named := tlsconfig.CertRegions(leaf)
	for _, n := range named {
		if r.peers[n] != nil && !slices.Contains(c.regions, n) {
			c.regions = append(c.regions, n)
		}
	}
	if len(c.regions) == 0 {
		return caller{}, fmt.Errorf("%w: the client certificate (%s) names no peer region (regions named: %s; want a URI SAN %s://NAME of a region in --peer-regions)",
			ErrNotAllowed, leaf.Subject, orNone(named), tlsconfig.RegionScheme)
	}
	return c, nil
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// mayRead allows c to read the state named name: this region's own (a
// peer's anti-entropy) or the caller's copy (its bootstrap).
func (r *Replicator) mayRead(c caller, name string) error {
	if name == r.cfg.Name || c.is(name) {
		return nil
	}
	return fmt.Errorf("%w: a certificate of region %s may not read the state of region %s", ErrNotAllowed, orNone(c.regions), name)
}

func toStatus(err error) error {
	var se *engine.StateError
	switch {
	case errors.Is(err, errNoPeerCert):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, ErrNotAllowed):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrStopping):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	case errors.Is(err, ErrCorrupt), errors.As(err, &se), errors.Is(err, contract.ErrInvalidArgument), errors.Is(err, contract.ErrInvalidID):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnknownRegion), errors.Is(err, chunksync.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, contract.ErrClosed), errors.Is(err, contract.ErrInsufficientStorage):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// invoke calls method of the region service on conn.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, in []byte) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	err := conn.Invoke(ctx, "/"+ServiceName+"/"+method, wrapperspb.Bytes(in), out, grpc.MaxCallRecvMsgSize(maxFetch))
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("%w: %w", chunksync.ErrNotFound, err)
		}
		return nil, err
	}
	return out.GetValue(), nil
}

// grpcSource is a peer region's state (name: the peer's own, or the
// peer's copy of another region's) as a chunksync.Source.
type grpcSource struct {
	conn        *grpc.ClientConn
	name        string
	timeout     time.Duration // of each call (0: none)
	incarnation uint64        // the peer's, from the manifest answer
}

// call invokes method with the source's per-call deadline.
func (s *grpcSource) call(ctx context.Context, method string, in []byte) ([]byte, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return invoke(ctx, s.conn, method, in)
}

func (s *grpcSource) Manifest(ctx context.Context) ([]byte, error) {
	b, err := s.call(ctx, "Manifest", encodeFetch(s.name, nil))
	if err != nil {
		return nil, err
	}
	inc, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: manifest answer", ErrCorrupt)
	}
	s.incarnation = inc
	return b[k:], nil
}

func (s *grpcSource) Fetch(ctx context.Context, h chunksync.Hash) ([]byte, error) {
	return s.call(ctx, "Fetch", encodeFetch(s.name, &h))
}
