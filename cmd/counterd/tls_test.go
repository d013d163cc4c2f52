package main

// TLS on the real binary: the three front ends with the right and a wrong
// CA, certificate reload without dropping connections, and a cluster with
// mutual TLS and gossip encryption that keeps out a node with a certificate
// from another CA or without the gossip key. Certificates are generated
// here (internal/testutil/certtest).

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/counterd/counterd/api/counterd/cluster/v1"
	cdclient "github.com/counterd/counterd/client"
	_ "github.com/counterd/counterd/internal/cluster/node" // registers the peer codec
	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

// presenting makes a client send cert whatever CAs the server asks for
// (with Certificates, Go sends none that the server would not accept).
func presenting(cert *tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
}

// httpsClient trusts only pool; cert, if set, is presented to the server.
func httpsClient(pool *x509.CertPool, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		tc.GetClientCertificate = presenting(cert)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

// isUnknownAuthority reports whether err is a failed verification of the
// server's certificate.
func isUnknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua) || (err != nil && strings.Contains(err.Error(), "certificate signed by unknown authority"))
}

func TestTLSFrontEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd processes")
	}
	dir := t.TempDir()
	ca, wrong := certtest.NewCA(t, "counterd test CA"), certtest.NewCA(t, "wrong CA")
	certFile, keyFile := ca.Issue(t, "node").Write(t, dir, "node")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	respAddr, grpcAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	p := start(t, t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile, "--resp", respAddr, "--grpc", grpcAddr)
	base := strings.Replace(p.addr, "http://", "https://", 1)
	ctx := t.Context()

	t.Run("http", func(t *testing.T) {
		c, err := cdclient.New(base, cdclient.WithCAFile(caFile), cdclient.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Incr(ctx, "tls:http", 5); err != nil {
			t.Fatalf("increment over https with the right CA: %v", err)
		}
		if v, err := c.Get(ctx, "tls:http"); err != nil || v.Value != 5 {
			t.Fatalf("get = %+v, %v; want 5", v, err)
		}
		if _, err := httpsClient(wrong.Pool(), nil).Get(base + "/healthz"); !isUnknownAuthority(err) {
			t.Fatalf("https with a wrong CA: %v, want unknown authority", err)
		}
		// Plain HTTP on the TLS port gets Go's 400, never the API.
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(p.addr + "/v1/counters/tls:http")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), `"value"`) {
				t.Fatalf("plain HTTP on the TLS port: %d %s", resp.StatusCode, body)
			}
		}
		// HTTP/1.1 only, also to a client that offers HTTP/2 first
		// (docs/security.md; the release build has no HTTP/2 server).
		conn, err := tls.Dial("tcp", strings.TrimPrefix(p.addr, "http://"), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := conn.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
			t.Fatalf("ALPN with h2 offered first negotiated %q, want http/1.1", got)
		}
	})

	t.Run("resp", func(t *testing.T) {
		rc := redis.NewClient(&redis.Options{Addr: respAddr, TLSConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}, MaxRetries: -1})
		defer rc.Close()
		if n, err := rc.IncrBy(ctx, "tls:resp", 3).Result(); err != nil || n != 3 {
			t.Fatalf("INCRBY over TLS = %d, %v; want 3", n, err)
		}
		bad := redis.NewClient(&redis.Options{Addr: respAddr, TLSConfig: &tls.Config{RootCAs: wrong.Pool(), ServerName: "localhost"}, MaxRetries: -1})
		defer bad.Close()
		if err := bad.Ping(ctx).Err(); !isUnknownAuthority(err) {
			t.Fatalf("RESP with a wrong CA: %v, want unknown authority", err)
		}
		// A plaintext client gets no answer to its command.
		raw, err := net.DialTimeout("tcp", respAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(raw, "*2\r\n$3\r\nGET\r\n$8\r\ntls:resp\r\n")
		if line, _ := bufio.NewReader(raw).ReadString('\n'); strings.HasPrefix(line, "$") || strings.HasPrefix(line, ":") {
			t.Fatalf("plaintext RESP answered %q", line)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		call := func(pool *x509.CertPool) error {
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{
				Domain:      "edge",
				Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
			})
			return err
		}
		// No policies are loaded: any answer but Unavailable means the
		// handshake went through and the service ran.
		if err := call(ca.Pool()); status.Code(err) == codes.Unavailable {
			t.Fatalf("gRPC with the right CA: %v", err)
		}
		if err := call(wrong.Pool()); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unknown authority") {
			t.Fatalf("gRPC with a wrong CA: %v, want Unavailable (unknown authority)", err)
		}
	})
}

// peerCN is the common name of the certificate the server at addr shows.
func peerCN(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// getOn sends GET /healthz on an open HTTP/1.1 connection.
func getOn(c *tls.Conn, rd *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func TestTLSCertificateReload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd processes")
	}
	dir := t.TempDir()
	ca := certtest.NewCA(t, "counterd test CA")
	certFile, keyFile := ca.Issue(t, "first").Write(t, dir, "node")
	p := start(t, t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile)
	addr := strings.TrimPrefix(p.addr, "http://")

	old, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldRd := bufio.NewReader(old)
	if err := getOn(old, oldRd); err != nil {
		t.Fatal(err)
	}

	// Replaced files are picked up by new handshakes within the check
	// interval (1s), without a signal.
	ca.Issue(t, "second").Write(t, dir, "node")
	deadline := time.Now().Add(5 * time.Second)
	for peerCN(t, addr, ca.Pool()) != "second" {
		if time.Now().After(deadline) {
			t.Fatal("new handshakes still see the first certificate after 5s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// SIGHUP re-reads at once and does not stop the process.
	ca.Issue(t, "third").Write(t, dir, "node")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for peerCN(t, addr, ca.Pool()) != "third" {
		if time.Now().After(deadline) {
			t.Fatal("new handshakes do not see the third certificate after SIGHUP")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The connection opened before both reloads still works, on its own
	// session.
	if err := getOn(old, oldRd); err != nil {
		t.Fatalf("connection opened before the reload: %v", err)
	}
	if cn := old.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "first" {
		t.Fatalf("old connection's certificate %q, want first", cn)
	}
}

// tlsNode is a cluster node started with TLS flags.
type tlsNode struct {
	id, http, grpc, gossip string
	logs                   *logBuf
	cmd                    *exec.Cmd
}

func startTLSNode(t *testing.T, id, join string, args ...string) *tlsNode {
	t.Helper()
	ports := freePorts(t, 4)
	n := &tlsNode{id: id, http: "127.0.0.1:" + ports[0], grpc: "127.0.0.1:" + ports[2], gossip: "127.0.0.1:" + ports[3], logs: &logBuf{}}
	if join == "" {
		join = n.gossip
	}
	args = append([]string{"--node-id", id, "--data", t.TempDir(), "--http", n.http, "--resp", "127.0.0.1:" + ports[1],
		"--grpc", n.grpc, "--gossip", n.gossip, "--join", join}, args...)
	n.cmd = exec.Command(counterdBin(t), args...)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		n.cmd.Wait()
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", id, n.logs.tail(40))
		}
	})
	return n
}

// members returns the ids in node n's GET /cluster, or an error.
func (n *tlsNode) members(hc *http.Client) ([]string, error) {
	resp, err := hc.Get("https://" + n.http + "/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v clusterView
	if err := decodeBody(resp, &v); err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range v.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

func decodeBody(resp *http.Response, v any) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// forwardedOK sums node n's counterd_cluster_forwarded_total{result="ok"}.
func forwardedOK(t *testing.T, hc *http.Client, n *tlsNode) float64 {
	t.Helper()
	resp, err := hc.Get("https://" + n.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "counterd_cluster_forwarded_total{") && strings.Contains(line, `result="ok"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

func TestTLSClusterMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd processes")
	}
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, "cluster CA"), certtest.NewCA(t, "other CA")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	writeKey := func(name string, b byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(slices.Repeat([]byte{b}, 32))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, wrongKey := writeKey("gossip.key", 1), writeKey("wrong.key", 2)
	flags := func(leaf *certtest.Leaf, name, gossipKey string) []string {
		cf, kf := leaf.Write(t, dir, name)
		return []string{"--tls-cert", cf, "--tls-key", kf, "--peer-ca", caFile, "--gossip-key-file", gossipKey}
	}
	n1 := startTLSNode(t, "n1", "", flags(ca.Issue(t, "n1"), "n1", key)...)
	n2 := startTLSNode(t, "n2", n1.gossip, flags(ca.Issue(t, "n2"), "n2", key)...)
	// A node with the gossip key and trusting the cluster CA, but with a
	// certificate from another CA; and one with a certificate from the
	// cluster CA but another gossip key.
	n3 := startTLSNode(t, "n3", n1.gossip, flags(other.Issue(t, "n3"), "n3", key)...)
	startTLSNode(t, "n4", n1.gossip, flags(ca.Issue(t, "n4"), "n4", wrongKey)...)
	hc := httpsClient(ca.Pool(), nil)

	deadline := time.Now().Add(20 * time.Second)
	for {
		m1, err1 := n1.members(hc)
		m2, err2 := n2.members(hc)
		if err1 == nil && err2 == nil && slices.Equal(m1, []string{"n1", "n2"}) && slices.Equal(m2, m1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 and n2 did not form a cluster: %v %v / %v %v", m1, err1, m2, err2)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Writes through either node land on the owner (forwarded over mutual
	// TLS) and read back through the other.
	ctx := t.Context()
	c1, err := cdclient.New("https://"+n1.http, cdclient.WithCAFile(caFile), cdclient.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cdclient.New("https://"+n2.http, cdclient.WithCAFile(caFile), cdclient.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := c1.Incr(ctx, fmt.Sprintf("mtls:%d", i), int64(i+1), cdclient.WithDurability("sync")); err != nil {
			t.Fatalf("increment %d through n1: %v", i, err)
		}
	}
	for i := range 20 {
		if v, err := c2.Get(ctx, fmt.Sprintf("mtls:%d", i)); err != nil || v.Value != int64(i+1) {
			t.Fatalf("mtls:%d through n2 = %+v, %v; want %d", i, v, err, i+1)
		}
	}

	if n := forwardedOK(t, hc, n1); n == 0 {
		t.Fatal("n1 forwarded nothing to n2: the writes did not cross the peer link")
	}

	// The outsiders stay out: give gossip and admission retries time
	// (several probe rounds), checking that neither ever shows up.
	until := time.Now().Add(3 * time.Second)
	for time.Now().Before(until) {
		for _, n := range []*tlsNode{n1, n2} {
			m, err := n.members(hc)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(m, "n3") || slices.Contains(m, "n4") {
				t.Fatalf("%s lists an outsider: %v", n.id, m)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Both outsiders did try: n3 gossiped and was refused admission, n4's
	// messages could not be decrypted.
	if !strings.Contains(n1.logs.tail(1000), "not admitted") {
		t.Errorf("n1 never tried to admit n3 (did n3 reach the gossip at all?)")
	}
	if !strings.Contains(n1.logs.tail(1000), "no installed keys could decrypt") {
		t.Errorf("n1 never received n4's gossip")
	}

	// n3 admitted n1 and n2 (their certificates verify against the CA it
	// trusts), so it forwards to them; their listeners refuse its
	// certificate, so its writes of ids they own fail, and nothing it
	// accepted reaches them.
	hc3 := httpsClient(other.Pool(), nil)
	deadline = time.Now().Add(10 * time.Second)
	for {
		m, err := n3.members(hc3)
		if err == nil && slices.Equal(m, []string{"n1", "n2", "n3"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n3 does not see n1 and n2: %v %v", m, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c3, err := cdclient.New("https://"+n3.http, cdclient.WithCAFile(other.WriteCA(t, dir, "other.pem")), cdclient.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	// Writes of ids that n1 or n2 own on n3's ring (the ring package with
	// the default settings, as the nodes run) are forwarded and refused.
	r3 := ring.New(ring.Config{})
	r3.Set([]string{"n1", "n2", "n3"})
	var ids []string
	for i := 0; len(ids) < 4; i++ {
		if id := fmt.Sprintf("rogue:%d", i); r3.Snapshot().Owner(id) != "n3" {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		_, err := c3.Incr(ctx, id, 1, cdclient.WithDurability("sync"))
		// The refusal shows as the owner's TLS alert, or as a broken
		// pipe when the owner closed the connection first.
		if !errors.Is(err, cdclient.ErrUnavailable) || !strings.Contains(err.Error(), "Apply on node") {
			t.Fatalf("write %s through n3: %v, want unavailable: the owner refuses its certificate", id, err)
		}
		if v, err := c1.Get(ctx, id); err != nil || v.Exists {
			t.Fatalf("%s on n1 = %+v, %v; want not found", id, v, err)
		}
	}

	// n3's own peer calls fail: its certificate is refused by n1's gRPC
	// listener, and without a certificate the peer service answers
	// Unauthenticated.
	rogue := other.Issue(t, "n3").TLS(t)
	peerCall := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(n1.grpc, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = clusterv1.NewPeerClient(conn).Read(cctx, &clusterv1.ReadRequest{Header: &clusterv1.Header{From: "n3"}, Op: clusterv1.ReadOp_READ_OP_GET, Id: "x"})
		return err
	}
	if err := peerCall(&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", GetClientCertificate: presenting(&rogue)}); status.Code(err) != codes.Unavailable {
		t.Fatalf("peer call with another CA's certificate: %v, want Unavailable (handshake refused)", err)
	}
	if err := peerCall(&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("peer call without a certificate: %v, want Unauthenticated", err)
	}
	// A certificate from the cluster's CA that names a region (a node of
	// some region sharing the CA) is no member of this cluster; one naming
	// no region is (the control: the refusals above are for the
	// certificate, not the call).
	regionCert := ca.IssueWith(t, "r9-node", certtest.Options{Regions: []string{"r9"}}).TLS(t)
	if err := peerCall(&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", GetClientCertificate: presenting(&regionCert)}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("peer call with the certificate of region r9: %v, want PermissionDenied", err)
	}
	member := ca.Issue(t, "n9").TLS(t)
	switch err := peerCall(&tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", GetClientCertificate: presenting(&member)}); status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unavailable:
		t.Fatalf("peer call with a member's certificate: %v", err)
	}
	// Same for a forwarded rate-limit check over HTTP.
	fwd := func(hc *http.Client) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+n1.http+"/ratelimit/check", strings.NewReader(`{"key":"k","limit":{"requests":1,"per":"1s"}}`))
		req.Header.Set("Counterd-Forwarded", "1")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := fwd(hc); err != nil || code != http.StatusForbidden {
		t.Fatalf("forwarded check without a peer certificate: %d, %v; want 403", code, err)
	}
	if _, err := fwd(httpsClient(ca.Pool(), &rogue)); err == nil {
		t.Fatal("forwarded check with another CA's certificate: handshake accepted")
	}
}
