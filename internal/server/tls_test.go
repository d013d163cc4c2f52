package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/testutil/certtest"
	"github.com/counterd/counterd/internal/tlsconfig"
)

func TestValidateTLS(t *testing.T) {
	bad := map[string]func(*Config){
		"cert without key":         func(c *Config) { c.TLSCert = "n.crt" },
		"key without cert":         func(c *Config) { c.TLSKey = "n.key" },
		"peer-ca without cert":     func(c *Config) { c.Join = "a:1"; c.PeerCA = "ca.pem"; c.GossipKeyFile = "k" },
		"cluster tls without ca":   func(c *Config) { c.Join = "a:1"; c.TLSCert, c.TLSKey = "n.crt", "n.key" },
		"peer-ca without gossip":   func(c *Config) { c.Join = "a:1"; c.TLSCert, c.TLSKey, c.PeerCA = "n.crt", "n.key", "ca.pem" },
		"peer-ca outside cluster":  func(c *Config) { c.TLSCert, c.TLSKey, c.PeerCA, c.GossipKeyFile = "n.crt", "n.key", "ca.pem", "k" },
		"peer-ca, no links":        func(c *Config) { c.TLSCert, c.TLSKey, c.PeerCA = "n.crt", "n.key", "ca.pem" },
		"peer-ca, region only":     func(c *Config) { c.Region = "eu"; c.TLSCert, c.TLSKey, c.PeerCA = "n.crt", "n.key", "ca.pem" },
		"gossip key outside clust": func(c *Config) { c.GossipKeyFile = "k" },
		"gossip key with regions":  func(c *Config) { c.Region, c.PeerRegions, c.GossipKeyFile = "eu", "us=127.0.0.1:9091", "k" },
		"region tls without ca": func(c *Config) {
			c.Region, c.PeerRegions, c.TLSCert, c.TLSKey = "eu", "us=127.0.0.1:9091", "n.crt", "n.key"
		},
	}
	for name, mod := range bad {
		cfg := DefaultConfig()
		mod(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	good := map[string]func(*Config){
		"plain":       func(*Config) {},
		"tls":         func(c *Config) { c.TLSCert, c.TLSKey = "n.crt", "n.key" },
		"gossip only": func(c *Config) { c.Join = "a:1"; c.GossipKeyFile = "k" },
		"full": func(c *Config) {
			c.Join = "a:1"
			c.TLSCert, c.TLSKey, c.PeerCA, c.GossipKeyFile = "n.crt", "n.key", "ca.pem", "k"
		},
		// Regions need no --join (nor a gossip key) for mutual TLS.
		"regions": func(c *Config) {
			c.Region, c.PeerRegions = "eu", "us=10.1.0.1:9090"
			c.TLSCert, c.TLSKey, c.PeerCA = "n.crt", "n.key", "ca.pem"
		},
		"cluster region": func(c *Config) {
			c.Region, c.PeerRegions, c.Join = "eu", "us=10.1.0.1:9090", "127.0.0.1:7946"
			c.TLSCert, c.TLSKey, c.PeerCA, c.GossipKeyFile = "n.crt", "n.key", "ca.pem", "k"
		},
	}
	for name, mod := range good {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTLSFlagsAndEnvironment(t *testing.T) {
	t.Setenv("COUNTERD_TLS_CERT", "env.crt")
	t.Setenv("COUNTERD_TLS_KEY", "env.key")
	t.Setenv("COUNTERD_PEER_CA", "ca.pem")
	t.Setenv("COUNTERD_GOSSIP_KEY_FILE", "gossip.key")
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("counterd", flag.ContinueOnError)
	cfg.BindFlags(fs)
	if err := fs.Parse([]string{"--tls-cert", "flag.crt"}); err != nil {
		t.Fatal(err)
	}
	if cfg.TLSCert != "flag.crt" || cfg.TLSKey != "env.key" || cfg.PeerCA != "ca.pem" || cfg.GossipKeyFile != "gossip.key" {
		t.Fatalf("config: %+v", cfg)
	}
}

func TestLoadSecurityErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, "n").Write(t, dir, "n")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	log := slog.New(slog.DiscardHandler)
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"missing cert":  {Config{TLSCert: filepath.Join(dir, "none.crt"), TLSKey: keyFile}, "no such file"},
		"swapped files": {Config{TLSCert: keyFile, TLSKey: certFile}, "tlsconfig"},
		"empty ca":      {Config{TLSCert: certFile, TLSKey: keyFile, PeerCA: write("empty.pem", "")}, tlsconfig.ErrNoCertificates.Error()},
		"short key":     {Config{GossipKeyFile: write("short.key", "abc")}, tlsconfig.ErrGossipKey.Error()},
	} {
		if _, err := loadSecurity(tc.cfg, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	sec, err := loadSecurity(Config{TLSCert: certFile, TLSKey: keyFile, PeerCA: ca.WriteCA(t, dir, "ca.pem"), GossipKeyFile: write("ok.key", strings.Repeat("k", 16))}, log)
	if err != nil || !sec.tlsOn() || sec.peerCA == nil || len(sec.gossipKey) != 16 {
		t.Fatalf("loadSecurity = %+v, %v", sec, err)
	}
	if sec, err := loadSecurity(Config{}, log); sec != nil || err != nil || sec.tlsOn() || sec.peerClient() != nil {
		t.Fatalf("nothing configured: %+v, %v", sec, err)
	}
}

// TestPeerOnlyForwarded: a rate-limit check marked as forwarded by a peer
// is decided where it lands, so only peers may send it: with --peer-ca a
// client with a peer certificate; without, a loopback client that is not
// a trusted proxy (protected mode allows a cluster without --peer-ca only
// on loopback); with --insecure and no --peer-ca anyone.
func TestPeerOnlyForwarded(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	peerState := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}
	for _, tc := range []struct {
		name   string
		sec    *security
		cfg    func(*Config)
		remote string
		tls    *tls.ConnectionState
		want   int
	}{
		{"loopback, no peer-ca", nil, nil, "127.0.0.1:5000", nil, 200},
		{"ipv6 loopback, no peer-ca", nil, nil, "[::1]:5000", nil, 200},
		{"remote, no peer-ca", nil, nil, "10.0.0.9:5000", nil, 403},
		{"remote, auth, no peer-ca", nil, func(c *Config) { c.Auth = "tokens.yaml" }, "192.0.2.1:5000", nil, 403},
		{"loopback trusted proxy", nil, func(c *Config) { c.TrustedProxies = "127.0.0.1" }, "127.0.0.1:5000", nil, 403},
		{"remote, insecure", nil, func(c *Config) { c.Insecure = true }, "10.0.0.9:5000", nil, 200},
		{"peer-ca, no certificate, loopback", &security{peerCA: &tlsconfig.CAFile{}}, nil, "127.0.0.1:5000", &tls.ConnectionState{}, 403},
		{"peer-ca, insecure, no certificate", &security{peerCA: &tlsconfig.CAFile{}}, func(c *Config) { c.Insecure = true }, "127.0.0.1:5000", &tls.ConnectionState{}, 403},
		{"peer-ca, peer certificate", &security{peerCA: &tlsconfig.CAFile{}}, nil, "10.0.0.9:5000", peerState, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := tc.sec.peerOnlyForwarded(cfg, ok)
			for _, fwd := range []bool{false, true} {
				req := httptest.NewRequest(http.MethodPost, "/ratelimit/check", strings.NewReader(`{}`))
				req.RemoteAddr, req.TLS = tc.remote, tc.tls
				want := http.StatusOK
				if fwd {
					req.Header.Set(ratelimit.ForwardedHeader, "1")
					want = tc.want
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != want {
					t.Fatalf("forwarded %v: %d, want %d (%s)", fwd, rec.Code, want, rec.Body)
				}
			}
		})
	}
}

// TestCheckPeerRegions: the peer service takes a peer certificate naming
// no region or this node's; one naming only other regions (a node of
// another region, same CA) is refused. The region service leaves the
// region check to the service; client methods are not checked here.
func TestCheckPeerRegions(t *testing.T) {
	leaf := func(regions ...string) *x509.Certificate {
		c := &x509.Certificate{}
		for _, r := range regions {
			c.URIs = append(c.URIs, tlsconfig.RegionURI(r))
		}
		return c
	}
	ctxWith := func(c *x509.Certificate) context.Context {
		st := tls.ConnectionState{}
		if c != nil {
			st.PeerCertificates = []*x509.Certificate{c}
		}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	peerMethod := "/" + cnode.PeerService + "/Read"
	regionMethod := regionMethodPrefix + "Push"
	for _, tc := range []struct {
		name, here, method string
		cert               *x509.Certificate
		want               codes.Code
	}{
		{"cluster cert", "", peerMethod, leaf(), codes.OK},
		{"cluster cert in a region", "eu", peerMethod, leaf(), codes.OK},
		{"own region", "eu", peerMethod, leaf("eu"), codes.OK},
		{"own among others", "eu", peerMethod, leaf("us", "eu"), codes.OK},
		{"other region", "eu", peerMethod, leaf("us"), codes.PermissionDenied},
		{"region cert, no region here", "", peerMethod, leaf("us"), codes.PermissionDenied},
		{"no certificate", "eu", peerMethod, nil, codes.Unauthenticated},
		{"region service, other region", "eu", regionMethod, leaf("us"), codes.OK},
		{"region service, no certificate", "eu", regionMethod, nil, codes.Unauthenticated},
		{"client method", "eu", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", nil, codes.OK},
	} {
		s := &security{region: tc.here}
		if got := status.Code(s.checkPeer(ctxWith(tc.cert), tc.method)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
