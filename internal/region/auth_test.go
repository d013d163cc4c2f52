package region

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/testutil/certtest"
	"github.com/counterd/counterd/internal/tlsconfig"
)

// withClientCert is ctx as a region call whose client presented a
// verified certificate naming regions (none: no certificate).
func withClientCert(regions ...string) context.Context {
	st := tls.ConnectionState{}
	if regions != nil {
		c := &x509.Certificate{}
		for _, r := range regions {
			c.URIs = append(c.URIs, tlsconfig.RegionURI(r))
		}
		st.PeerCertificates = []*x509.Certificate{c}
	}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
}

// TestCallerAuthorization: with AuthorizePeers a call needs a certificate
// naming a peer region; it may push only as that region and read only
// this region's state or its own region's copy.
func TestCallerAuthorization(t *testing.T) {
	r := &Replicator{cfg: Config{Name: "eu", AuthorizePeers: true}, peers: map[string]*peerLink{"us": {}, "ap": {}}}
	if _, err := r.callerOf(withClientCert()); status.Code(toStatus(err)) != codes.Unauthenticated {
		t.Fatalf("no certificate: %v, want Unauthenticated", err)
	}
	if _, err := r.callerOf(context.Background()); status.Code(toStatus(err)) != codes.Unauthenticated {
		t.Fatalf("no transport info: %v, want Unauthenticated", err)
	}
	for _, names := range [][]string{{}, {"eu"}, {"xx"}} {
		if _, err := r.callerOf(withClientCert(names...)); !errors.Is(err, ErrNotAllowed) || status.Code(toStatus(err)) != codes.PermissionDenied {
			t.Fatalf("certificate naming %v: %v, want PermissionDenied", names, err)
		}
	}
	c, err := r.callerOf(withClientCert("xx", "us"))
	if err != nil || !c.is("us") || c.is("ap") || c.is("xx") {
		t.Fatalf("certificate naming xx and us: %+v, %v", c, err)
	}
	for name, ok := range map[string]bool{"eu": true, "us": true, "ap": false} {
		if err := r.mayRead(c, name); (err == nil) != ok {
			t.Errorf("us reading %s: %v", name, err)
		}
	}
	// Without AuthorizePeers (no --peer-ca: loopback or --insecure) any
	// caller is any region, as before.
	open := &Replicator{cfg: Config{Name: "eu"}, peers: r.peers}
	if c, err := open.callerOf(context.Background()); err != nil || !c.is("ap") || open.mayRead(c, "us") != nil {
		t.Fatalf("without AuthorizePeers: %+v, %v", c, err)
	}
}

// TestLinkCredentialsNameTheRegion: a link accepts a gateway only with a
// certificate naming the region it dials.
func TestLinkCredentialsNameTheRegion(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "regions")
	reloader := func(name string, regions ...string) *tlsconfig.Reloader {
		cf, kf := ca.IssueWith(t, name, certtest.Options{Regions: regions}).Write(t, dir, name)
		rl, err := tlsconfig.NewReloader(cf, kf, tlsconfig.ReloaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rl
	}
	client := tlsconfig.PeerClient(reloader("eu-1", "eu"), ca.Pool())
	gateway := reloader("us-1", "us")
	handshake := func(region string) error {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			sc := tlsconfig.Server(gateway, ca.Pool())
			sc.NextProtos = []string{"h2"} // as gRPC's server
			s := tls.Server(b, sc)
			_ = s.Handshake()
			s.Close()
		}()
		_, _, err := linkCredentials(client, region).ClientHandshake(context.Background(), "us-1:9090", a)
		return err
	}
	if err := handshake("us"); err != nil {
		t.Fatalf("dialling us at a gateway of us: %v", err)
	}
	if err := handshake("ap"); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("dialling ap at a gateway of us: %v, want ErrNotAllowed", err)
	}
}
