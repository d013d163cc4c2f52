package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/cluster/membership"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/tlsconfig"
)

// security is what the TLS flags load (docs/security.md, "TLS"). A nil
// *security, or zero fields, means that part is off.
type security struct {
	cert      *tlsconfig.Reloader // --tls-cert, --tls-key
	peerCA    *tlsconfig.CAFile   // --peer-ca, re-read on SIGHUP
	gossipKey []byte              // --gossip-key-file
	region    string              // --region: a peer certificate naming regions must name this one to be a cluster member
}

// loadSecurity reads the TLS files named by cfg; it returns nil when TLS
// and gossip encryption are both off.
func loadSecurity(cfg Config, log *slog.Logger) (*security, error) {
	if cfg.TLSCert == "" && cfg.GossipKeyFile == "" {
		return nil, nil
	}
	s := &security{region: cfg.Region}
	var err error
	if cfg.TLSCert != "" {
		opts := tlsconfig.ReloaderOptions{Logger: log}
		if cfg.PeerCA != "" && cfg.PeerRegions != "" {
			// Peer regions accept this node's certificate only as the
			// region it names: a certificate that does not name this
			// one would be refused by every peer.
			opts.Check = func(c *x509.Certificate) error {
				if !slices.Contains(tlsconfig.CertRegions(c), cfg.Region) {
					return fmt.Errorf("%w: with --peer-regions and --peer-ca, --tls-cert must name region %s in a URI SAN %s (names %v)",
						errRegionCert, cfg.Region, tlsconfig.RegionURI(cfg.Region), tlsconfig.CertRegions(c))
				}
				return nil
			}
		}
		if s.cert, err = tlsconfig.NewReloader(cfg.TLSCert, cfg.TLSKey, opts); err != nil {
			return nil, err
		}
		log.Info("tls on", "cert", cfg.TLSCert, "subject", s.cert.Certificate().Leaf.Subject.String(),
			"not_after", s.cert.Certificate().Leaf.NotAfter, "peer_ca", cfg.PeerCA)
	}
	if cfg.PeerCA != "" {
		if s.peerCA, err = tlsconfig.LoadCAFile(cfg.PeerCA); err != nil {
			return nil, err
		}
	}
	if cfg.GossipKeyFile != "" {
		if s.gossipKey, err = tlsconfig.LoadGossipKey(cfg.GossipKeyFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// tlsOn reports whether the front ends serve TLS.
func (s *security) tlsOn() bool { return s != nil && s.cert != nil }

// server is the TLS configuration of every front end.
func (s *security) server() *tls.Config { return tlsconfig.ServerRoots(s.cert, s.roots()) }

// roots is the current --peer-ca pool's getter, nil without --peer-ca.
func (s *security) roots() func() *x509.CertPool {
	if s == nil || s.peerCA == nil {
		return nil
	}
	return s.peerCA.Pool
}

// peerClient is the client side of peer traffic, nil without --peer-ca.
func (s *security) peerClient() *tls.Config {
	if s == nil || s.peerCA == nil {
		return nil
	}
	return tlsconfig.PeerClientRoots(s.cert, s.peerCA.Pool, nil)
}

// reloadOnHUP re-reads the certificate and the --peer-ca file on every
// SIGHUP until ctx is done (besides the reloader's own checks for changed
// certificate files). New handshakes of every front end and every cluster
// and region link use them; open connections keep their sessions.
func (s *security) reloadOnHUP(ctx context.Context, log *slog.Logger) {
	if !s.tlsOn() {
		return
	}
	onSIGHUP(ctx, func() {
		if changed, err := s.cert.Reload(); err != nil {
			log.Warn("SIGHUP: tls certificate not reloaded, keeping the previous one", "err", err)
		} else {
			log.Info("SIGHUP: tls certificate checked", "changed", changed)
		}
		if s.peerCA == nil {
			return
		}
		if changed, err := s.peerCA.Reload(); err != nil {
			log.Warn("SIGHUP: --peer-ca not reloaded, keeping the previous CAs", "err", err)
		} else {
			log.Info("SIGHUP: --peer-ca checked", "changed", changed)
		}
	})
}

var errRegionCert = errors.New("server: certificate of the wrong region")

// clusterMember refuses a peer certificate that names regions but not this
// node's: a node of another region (same CA) is no member of this cluster.
// A certificate naming no region is a member (a cluster without regions).
func (s *security) clusterMember(leaf *x509.Certificate) error {
	names := tlsconfig.CertRegions(leaf)
	if len(names) == 0 || (s.region != "" && slices.Contains(names, s.region)) {
		return nil
	}
	here := s.region
	if here == "" {
		here = "(none)"
	}
	return fmt.Errorf("%w: a certificate of region %s is not a member of this cluster (region %s)", errRegionCert, strings.Join(names, ", "), here)
}

// admitPeer, with --peer-ca, is the gossip admission check: a member
// enters the ring only once its gRPC address has answered a TLS handshake
// with a certificate signed by the peer CA (and accepted this node's) that
// names no region or this node's (clusterMember).
func (s *security) admitPeer() func(context.Context, membership.Member) error {
	pc := s.peerClient()
	if pc == nil { // nil *security too
		return nil
	}
	return func(ctx context.Context, m membership.Member) error {
		var meta cnode.Meta
		if err := json.Unmarshal(m.Meta, &meta); err != nil || meta.GRPC == "" {
			return fmt.Errorf("%w: no gRPC address in its gossip metadata", errNotAdmitted)
		}
		cfg := tlsconfig.PeerClientRoots(s.cert, s.peerCA.Pool, s.clusterMember)
		cfg.NextProtos = []string{"h2"} // what the gRPC server expects
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", meta.GRPC)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errNotAdmitted, meta.GRPC, err)
		}
		return c.Close()
	}
}

var errNotAdmitted = errors.New("server: cluster member not admitted")

// grpcOptions are the --grpc server's TLS options: its credentials and,
// with --peer-ca, interceptors that refuse peer-service calls from clients
// without a peer certificate.
func (s *security) grpcOptions() []grpc.ServerOption {
	if !s.tlsOn() {
		return nil
	}
	opts := []grpc.ServerOption{grpc.Creds(credentials.NewTLS(s.server()))}
	if s.peerCA != nil {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := s.checkPeer(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := s.checkPeer(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	return opts
}

// checkPeer refuses a peer-service or region call whose client did not
// present a certificate signed by the peer CA, and a peer-service call
// with the certificate of another region (clusterMember). The region
// service checks which region a certificate may act as (region.ServiceName).
func (s *security) checkPeer(ctx context.Context, method string) error {
	isPeer := strings.HasPrefix(method, "/"+cnode.PeerService+"/")
	if !isPeer && !strings.HasPrefix(method, regionMethodPrefix) {
		return nil
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if leaf := tlsconfig.PeerLeaf(&ti.State); leaf != nil {
				if !isPeer {
					return nil
				}
				if err := s.clusterMember(leaf); err != nil {
					return status.Error(codes.PermissionDenied, err.Error())
				}
				return nil
			}
		}
	}
	return status.Error(codes.Unauthenticated, "peer and region calls need a client certificate signed by --peer-ca")
}

// peerOnlyForwarded refuses a rate-limit check marked as forwarded by a
// peer (decided here without forwarding, so a client could use it to
// bypass the key's owner) unless it comes from a peer: with --peer-ca, a
// request with a peer certificate; without, one from a loopback address
// that is not a --trusted-proxies proxy (the only peers protected mode
// lets a cluster without --peer-ca have, unless --insecure).
func (s *security) peerOnlyForwarded(cfg Config, next http.Handler) http.Handler {
	if cfg.Insecure && (s == nil || s.peerCA == nil) {
		return next
	}
	trusted := cfg.trustedProxies()
	fromPeer := func(r *http.Request) bool {
		if s != nil && s.peerCA != nil {
			return tlsconfig.IsPeer(r.TLS)
		}
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			return false
		}
		for _, p := range trusted {
			if p.Contains(ap.Addr().Unmap()) {
				return false
			}
		}
		return true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ratelimit.ForwardedHeader) != "" && !fromPeer(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"status":"error","error":{"code":"forbidden","message":"` +
				ratelimit.ForwardedHeader + ` is for peers only: it needs a peer certificate (--peer-ca), or a loopback peer without one"}}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routerConfig points forwarded rate-limit checks at the owners' HTTPS
// address with this node's peer certificate when TLS is on.
func (s *security) routerConfig(owner func(string) (bool, string)) ratelimit.RouterConfig {
	if !s.tlsOn() {
		return ratelimit.RouterConfig{Owner: owner}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.TLSClientConfig = s.peerClient()
	return ratelimit.RouterConfig{
		Owner: func(key string) (bool, string) {
			self, addr := owner(key)
			if addr != "" && !strings.Contains(addr, "://") {
				addr = "https://" + addr
			}
			return self, addr
		},
		HTTPClient: &http.Client{Transport: t},
	}
}
