package main

// Region links with mutual TLS on the real binary: two regions started
// with the documented secure flags (--auth, --tls-cert/--tls-key naming
// the region as counterd-region://NAME, --peer-ca) replicate; strangers
// (no certificate, another CA's certificate, the same CA's certificate of
// another region or of no region) can neither bootstrap from nor push into
// a region, over direct calls or as a counterd process; a node's
// certificate must name its region to start; and a peer certificate
// rotated by SIGHUP is the one the links present.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/region"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

// regionPKI is a deployment's certificate authority and tokens file.
type regionPKI struct {
	t      *testing.T
	dir    string
	ca     *certtest.CA
	caFile string
	tokens string
}

func newRegionPKI(t *testing.T) *regionPKI {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "regions CA")
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(tokensFile("")), 0o600); err != nil {
		t.Fatal(err)
	}
	return &regionPKI{t: t, dir: dir, ca: ca, caFile: ca.WriteCA(t, dir, "ca.pem"), tokens: tokens}
}

// secureFlags are the documented flags of a region node: tokens,
// the node's certificate naming its region, and the peer CA.
func (k *regionPKI) secureFlags(name string, leaf *certtest.Leaf) []string {
	cf, kf := leaf.Write(k.t, k.dir, name)
	return []string{"--auth", k.tokens, "--tls-cert", cf, "--tls-key", kf, "--peer-ca", k.caFile}
}

// client is an HTTPS client of the node at p with the admin token.
func (k *regionPKI) client(p *proc) *cdclient.Client {
	c, err := cdclient.New(strings.Replace(p.addr, "http://", "https://", 1), cdclient.WithCAFile(k.caFile), cdclient.WithToken(tokAdmin), cdclient.WithRetries(0))
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

// globalOf is the global value of id read through c (0 when absent).
func globalOf(t *testing.T, c *cdclient.Client, id string) (int64, bool) {
	t.Helper()
	g, err := c.GetGlobal(t.Context(), id)
	if err != nil {
		t.Fatalf("global read of %s: %v", id, err)
	}
	v, _ := g.Value.Int64()
	return v, g.Exists
}

// waitGlobal waits until the global value of id read through c is want.
func waitGlobal(t *testing.T, c *cdclient.Client, id string, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, _ := globalOf(t, c, id)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("global %s = %d after %v, want %d", id, v, within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// regionCall invokes method of the region service at addr over TLS with
// tc (trusting the deployment's CA, presenting what tc presents).
func regionCall(t *testing.T, addr string, tc *tls.Config, method string, in []byte) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return conn.Invoke(ctx, "/"+region.ServiceName+"/"+method, wrapperspb.Bytes(in), new(wrapperspb.BytesValue))
}

// manifestRequest asks for the manifest of the state named name (this
// region's own, or its copy of a peer's: what a bootstrap reads).
func manifestRequest(name string) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(name))), name...)
}

// pwnPush is a push claiming to come from region from, setting
// nsB:pwned to 1000000.
func pwnPush(from string) []byte {
	return region.EncodeBatch(nil, &region.Batch{
		From: from, Node: "intruder", Incarnation: 7, AsOf: time.Now().UnixNano(), Complete: true,
		States: []engine.State{{ID: "nsB:pwned", Kind: contract.KindCounter, Version: 1, UpdatedAt: time.Now().UnixNano(), Data: binary.AppendVarint(nil, 1000000)}},
	})
}

// pushErrors sums the failed pushes of every link of the node at base
// (GET /regions, plain HTTP or HTTPS with hc) and returns the last error.
func pushErrors(t *testing.T, hc *http.Client, base string) (errs uint64, last string) {
	t.Helper()
	resp, err := hc.Get(base + "/regions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st region.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		errs += p.PushErrors
		last = p.LastError
	}
	return errs, last
}

func TestRegionsMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd processes")
	}
	k := newRegionPKI(t)
	other := certtest.NewCA(t, "stranger CA")
	g1, g2, g3 := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t) // r3 is listed, never started
	r1Leaf := k.ca.IssueWith(t, "r1-node", certtest.Options{Regions: []string{"r1"}})
	r2Leaf := k.ca.IssueWith(t, "r2-node", certtest.Options{Regions: []string{"r2"}})
	common := []string{"--region-interval", "200ms"}
	r1 := start(t, t.TempDir(), append(append([]string{"--region", "r1", "--grpc", g1, "--peer-regions", "r2=" + g2 + ",r3=" + g3}, common...), k.secureFlags("r1", r1Leaf)...)...)
	r2 := start(t, t.TempDir(), append(append([]string{"--region", "r2", "--grpc", g2, "--peer-regions", "r1=" + g1}, common...), k.secureFlags("r2", r2Leaf)...)...)
	c1, c2 := k.client(r1), k.client(r2)
	ctx := t.Context()

	// The legitimate peer replicates both ways.
	if _, err := c1.Incr(ctx, "pv:a", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Incr(ctx, "pv:b", 7); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c2, "pv:a", 5, 30*time.Second)
	waitGlobal(t, c1, "pv:b", 7, 30*time.Second)

	tlsWith := func(leaf *certtest.Leaf) *tls.Config {
		tc := &tls.Config{RootCAs: k.ca.Pool(), ServerName: "localhost"}
		if leaf != nil {
			cert := leaf.TLS(t)
			tc.GetClientCertificate = presenting(&cert)
		}
		return tc
	}
	// A control: r2's own certificate reads r1's state and its copy of
	// r2, so the requests below are well-formed and refused for who sends
	// them.
	for _, name := range []string{"r1", "r2"} {
		if err := regionCall(t, g1, tlsWith(r2Leaf), "Manifest", manifestRequest(name)); err != nil {
			t.Fatalf("r2's certificate reading %s's state on r1: %v", name, err)
		}
	}
	strangers := []struct {
		name string
		leaf *certtest.Leaf
		want codes.Code
	}{
		{"no certificate", nil, codes.Unauthenticated},
		{"another CA's certificate naming r2", other.IssueWith(t, "r2-fake", certtest.Options{Regions: []string{"r2"}}), codes.Unavailable},
		{"same CA, region r3 (a peer) acting as r2", k.ca.IssueWith(t, "r3-node", certtest.Options{Regions: []string{"r3"}}), codes.PermissionDenied},
		{"same CA, region r9 (no peer)", k.ca.IssueWith(t, "r9-node", certtest.Options{Regions: []string{"r9"}}), codes.PermissionDenied},
		{"same CA, a cluster certificate of no region", k.ca.Issue(t, "n1"), codes.PermissionDenied},
		{"same CA, region r1 itself", k.ca.IssueWith(t, "r1-other", certtest.Options{Regions: []string{"r1"}}), codes.PermissionDenied},
	}
	for _, s := range strangers {
		t.Run(s.name, func(t *testing.T) {
			tc := tlsWith(s.leaf)
			calls := map[string][]byte{
				"bootstrap (r1's copy of r2)": manifestRequest("r2"),
				"push as r2":                  pwnPush("r2"),
			}
			if s.name != "same CA, region r3 (a peer) acting as r2" {
				// r3 is a peer region: reading r1's own state is its right.
				calls["anti-entropy read of r1"] = manifestRequest("r1")
			}
			for what, in := range calls {
				method := "Manifest"
				if strings.HasPrefix(what, "push") {
					method = "Push"
				}
				err := regionCall(t, g1, tc, method, in)
				if status.Code(err) != s.want {
					t.Errorf("%s: %v, want %v", what, err, s.want)
				}
			}
		})
	}

	// Stranger processes, as in the attack: a counterd claiming region r2
	// without TLS, and one with another CA's certificate (trusting r1's CA
	// too, so only r1's refusal stops it). Each writes nsB:pwned and tries
	// to bootstrap from r1 and push to it.
	otherBundle := filepath.Join(k.dir, "both.pem")
	if err := os.WriteFile(otherBundle, append(append([]byte{}, other.PEM...), k.ca.PEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	fcf, fkf := other.IssueWith(t, "r2-fake", certtest.Options{Regions: []string{"r2"}}).Write(t, k.dir, "fake")
	for _, sp := range []struct {
		name  string
		flags []string
		https bool
	}{
		{"plaintext", nil, false},
		{"another CA", []string{"--tls-cert", fcf, "--tls-key", fkf, "--peer-ca", otherBundle}, true},
	} {
		t.Run("stranger process "+sp.name, func(t *testing.T) {
			args := append([]string{"--region", "r2", "--grpc", "127.0.0.1:" + freePort(t), "--peer-regions", "r1=" + g1, "--region-interval", "200ms"}, sp.flags...)
			p := start(t, t.TempDir(), args...)
			opts := []cdclient.Option{cdclient.WithRetries(0)}
			addr, hc := p.addr, client
			if sp.https {
				addr = strings.Replace(addr, "http://", "https://", 1)
				opts = append(opts, cdclient.WithCAFile(otherBundle))
				hc = httpsClient(other.Pool(), nil)
			}
			sc, err := cdclient.New(addr, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sc.Incr(ctx, "nsB:pwned", 1000000); err != nil {
				t.Fatal(err)
			}
			// Its links did try, and failed.
			deadline := time.Now().Add(30 * time.Second)
			for {
				n, last := pushErrors(t, hc, addr)
				if n >= 3 {
					t.Logf("stranger's pushes: %d errors, last %q", n, last)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the stranger's pushes to r1 did not fail 3 times in 30 s: %d (%q)", n, last)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// Its bootstrap got nothing of r1's copy of r2 (pv:b), nor its
			// anti-entropy r1's state (pv:a).
			if v, err := sc.Get(ctx, "pv:b"); err != nil || v.Exists {
				t.Fatalf("the stranger bootstrapped pv:b from r1: %+v, %v", v, err)
			}
			if g, err := sc.GetGlobal(ctx, "pv:a"); err != nil || g.Exists {
				t.Fatalf("the stranger read r1's pv:a: %+v, %v", g, err)
			}
			p.term(t)
		})
	}

	// Nothing any stranger sent reached r1, nor through it r2.
	for _, c := range []*cdclient.Client{c1, c2} {
		if v, ok := globalOf(t, c, "nsB:pwned"); ok || v != 0 {
			t.Fatalf("nsB:pwned reached a region: %d", v)
		}
	}
	// The legitimate peer still replicates.
	if _, err := c2.Incr(ctx, "pv:b", 1); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c1, "pv:b", 8, 30*time.Second)

	// A node whose certificate does not name its region does not start.
	bad := k.ca.IssueWith(t, "r2-wrong", certtest.Options{Regions: []string{"r3"}})
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(sctx, counterdBin(t), append([]string{"--data", t.TempDir(), "--http", "127.0.0.1:0", "--resp", "",
		"--region", "r2", "--grpc", "127.0.0.1:0", "--peer-regions", "r1=" + g1}, k.secureFlags("r2-wrong", bad)...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "must name region r2") || !strings.Contains(string(out), "counterd-region://r2") {
		t.Fatalf("start with a certificate of region r3 as r2: %v\n%s", err, out)
	}
}

// TestRegionsPeerCertificateRotation: region r1 starts with a certificate
// about to expire; a new one is written and SIGHUP makes r1 serve it at
// once (its gRPC listener shows it) and present it on its region link:
// after the old one expired, the link to r2 (through a proxy) is cut and
// redialled, and r1's writes still reach r2, which refuses expired
// certificates. Then the CA itself is rotated by SIGHUP alone: both CAs
// in --peer-ca, certificates of the new CA, the old CA retired; the
// redialled links replicate both ways and a valid certificate of the old
// CA is refused.
func TestRegionsPeerCertificateRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs counterd processes")
	}
	k := newRegionPKI(t)
	g1, g2 := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	proxy, back := newCutProxy(t, g2), newCutProxy(t, g1)
	counterdBin(t) // built before the short validity starts
	expires := time.Now().Add(12 * time.Second)
	old := k.ca.IssueWith(t, "r1-old", certtest.Options{Regions: []string{"r1"}, NotAfter: expires})
	common := []string{"--region-interval", "200ms"}
	r1Flags := k.secureFlags("r1", old)
	r2 := start(t, t.TempDir(), append(append([]string{"--region", "r2", "--grpc", g2, "--peer-regions", "r1=" + back.addr()}, common...),
		k.secureFlags("r2", k.ca.IssueWith(t, "r2-node", certtest.Options{Regions: []string{"r2"}}))...)...)
	r1 := start(t, t.TempDir(), append(append([]string{"--region", "r1", "--grpc", g1, "--peer-regions", "r2=" + proxy.addr()}, common...), r1Flags...)...)
	c1, c2 := k.client(r1), k.client(r2)
	ctx := t.Context()

	if _, err := c1.Incr(ctx, "rot:a", 1); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c2, "rot:a", 1, 20*time.Second)
	if time.Now().After(expires) {
		t.Fatal("the first certificate expired before the first replication: the test machine is too slow for its 12 s")
	}

	// Rotate: the same files, a new certificate, SIGHUP.
	k.ca.IssueWith(t, "r1-new", certtest.Options{Regions: []string{"r1"}}).Write(t, k.dir, "r1")
	if err := r1.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for peerCN(t, g1, k.ca.Pool()) != "r1-new" {
		if time.Now().After(deadline) {
			t.Fatal("r1's gRPC listener does not serve the new certificate 5 s after SIGHUP")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Once the old certificate has expired, new handshakes with it fail:
	// cut the link so r1 redials r2, and write.
	time.Sleep(time.Until(expires) + 1500*time.Millisecond)
	proxy.setCut(true)
	time.Sleep(300 * time.Millisecond)
	proxy.setCut(false)
	if _, err := c1.Incr(ctx, "rot:a", 10); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c2, "rot:a", 11, 30*time.Second)
	// And the other way, on r2's link established before the rotation
	// and on any it makes since.
	if _, err := c2.Incr(ctx, "rot:b", 3); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c1, "rot:b", 3, 30*time.Second)

	// The expired certificate itself is refused now: a region call with
	// it fails its handshake.
	cert := old.TLS(t)
	err := regionCall(t, g2, &tls.Config{RootCAs: k.ca.Pool(), ServerName: "localhost", GetClientCertificate: presenting(&cert)}, "Manifest", manifestRequest("r2"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a region call with the expired certificate: %v, want Unavailable (handshake refused)", err)
	}

	// CA rotation, by SIGHUP only.
	ca2 := certtest.NewCA(t, "regions CA 2")
	hup := func(what string) {
		t.Helper()
		want := []int{strings.Count(r1.logs(), what) + 1, strings.Count(r2.logs(), what) + 1}
		for i, p := range []*proc{r1, r2} {
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for strings.Count(p.logs(), what) < want[i] {
				if time.Now().After(deadline) {
					t.Fatalf("no %q in the log of r%d 5 s after SIGHUP", what, i+1)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	const caChanged = `msg="SIGHUP: --peer-ca checked" changed=true`
	if err := os.WriteFile(k.caFile, append(append([]byte{}, k.ca.PEM...), ca2.PEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	hup(caChanged)
	ca2.IssueWith(t, "r1-ca2", certtest.Options{Regions: []string{"r1"}}).Write(t, k.dir, "r1")
	r2ca2 := ca2.IssueWith(t, "r2-ca2", certtest.Options{Regions: []string{"r2"}})
	r2ca2.Write(t, k.dir, "r2")
	hup(`msg="SIGHUP: tls certificate checked" changed=true`)
	for addr, cn := range map[string]string{g1: "r1-ca2", g2: "r2-ca2"} {
		if got := peerCN(t, addr, ca2.Pool()); got != cn {
			t.Fatalf("%s serves %q after SIGHUP, want %s", addr, got, cn)
		}
	}
	if err := os.WriteFile(k.caFile, ca2.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	hup(caChanged)
	for _, p := range []*cutProxy{proxy, back} {
		p.setCut(true)
	}
	time.Sleep(300 * time.Millisecond)
	for _, p := range []*cutProxy{proxy, back} {
		p.setCut(false)
	}
	// The HTTPS clients trust the new CA now.
	k.caFile = ca2.WriteCA(t, k.dir, "ca2-client.pem")
	c1, c2 = k.client(r1), k.client(r2)
	if _, err := c1.Incr(ctx, "rot:a", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Incr(ctx, "rot:b", 30); err != nil {
		t.Fatal(err)
	}
	waitGlobal(t, c2, "rot:a", 111, 30*time.Second)
	waitGlobal(t, c1, "rot:b", 33, 30*time.Second)
	// A valid certificate of the retired CA is refused; the new one of r2
	// is served (the control).
	retired := k.ca.IssueWith(t, "r2-old-ca", certtest.Options{Regions: []string{"r2"}}).TLS(t)
	both := x509.NewCertPool()
	both.AddCert(k.ca.Cert)
	both.AddCert(ca2.Cert)
	err = regionCall(t, g1, &tls.Config{RootCAs: both, ServerName: "localhost", GetClientCertificate: presenting(&retired)}, "Manifest", manifestRequest("r1"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a region call with the retired CA's certificate: %v, want Unavailable (handshake refused)", err)
	}
	current := r2ca2.TLS(t)
	if err := regionCall(t, g1, &tls.Config{RootCAs: both, ServerName: "localhost", GetClientCertificate: presenting(&current)}, "Manifest", manifestRequest("r1")); err != nil {
		t.Fatalf("a region call with r2's new certificate: %v", err)
	}
}
