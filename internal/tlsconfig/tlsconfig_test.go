package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/testutil/certtest"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestReloaderFollowsFileChanges(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	first, second := ca.Issue(t, "first"), ca.Issue(t, "second")
	certFile, keyFile := first.Write(t, dir, "node")
	clk := &fakeClock{t: time.Unix(1000, 0)}
	var logs bytes.Buffer
	r, err := NewReloader(certFile, keyFile, ReloaderOptions{Interval: 5 * time.Second, Now: clk.now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Certificate().Leaf.Subject.CommonName; got != "first" {
		t.Fatalf("initial cert %q", got)
	}
	second.Write(t, dir, "node")
	if got := r.Certificate().Leaf.Subject.CommonName; got != "first" {
		t.Fatalf("cert %q before the interval passed, want the old one", got)
	}
	clk.t = clk.t.Add(5 * time.Second)
	if got := r.Certificate().Leaf.Subject.CommonName; got != "second" {
		t.Fatalf("cert %q after the interval, want second", got)
	}

	// A half-written rotation (new cert, old key) keeps the previous pair.
	third := ca.Issue(t, "third")
	if err := os.WriteFile(certFile, third.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.t = clk.t.Add(5 * time.Second)
		if got := r.Certificate().Leaf.Subject.CommonName; got != "second" {
			t.Fatalf("mismatched pair served %q, want the previous second", got)
		}
	}
	if n := strings.Count(logs.String(), "not reloaded"); n != 1 {
		t.Fatalf("the same failure logged %d times, want once:\n%s", n, logs.String())
	}
	if _, err := r.Reload(); err == nil {
		t.Fatal("Reload of a mismatched pair: no error")
	}
	if err := os.WriteFile(keyFile, third.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// Reload (SIGHUP) does not wait for the interval.
	if changed, err := r.Reload(); err != nil || !changed {
		t.Fatalf("Reload = %v, %v; want true, nil", changed, err)
	}
	if got := r.Certificate().Leaf.Subject.CommonName; got != "third" {
		t.Fatalf("cert %q after Reload, want third", got)
	}
	if changed, err := r.Reload(); err != nil || changed {
		t.Fatalf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}
}

func TestNewReloaderRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	a, b := ca.Issue(t, "a"), ca.Issue(t, "b")
	certFile, _ := a.Write(t, dir, "a")
	_, keyFile := b.Write(t, dir, "b")
	if _, err := NewReloader(certFile, keyFile, ReloaderOptions{}); err == nil {
		t.Fatal("certificate with another key's file accepted")
	}
	if _, err := NewReloader(filepath.Join(dir, "missing.crt"), keyFile, ReloaderOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// handshake connects a client with cfg to a server with srv over loopback
// TCP and returns both connection states and the first error either side
// saw.
func handshake(t *testing.T, srv, cfg *tls.Config) (tls.ConnectionState, tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		s := tls.Server(raw, srv)
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1}) // the client waits for it
		}
		done <- result{s.ConnectionState(), err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, cfg)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cerr := c.Handshake()
	if cerr == nil {
		// In TLS 1.3 the server's verdict on the client certificate
		// arrives after the client's handshake: read past it.
		_, cerr = c.Read(make([]byte, 1))
	}
	r := <-done
	if cerr == nil {
		cerr = r.err
	}
	return c.ConnectionState(), r.cs, cerr
}

func TestPeerMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, "cluster"), certtest.NewCA(t, "other")
	reloader := func(l *certtest.Leaf, name string) *Reloader {
		cf, kf := l.Write(t, dir, name)
		r, err := NewReloader(cf, kf, ReloaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := reloader(ca.Issue(t, "a"), "a")
	b := reloader(ca.Issue(t, "b"), "b")
	rogue := reloader(other.Issue(t, "rogue"), "rogue")
	pool := ca.Pool()

	t.Run("peers", func(t *testing.T) {
		_, scs, err := handshake(t, Server(a, pool), PeerClient(b, pool))
		if err != nil {
			t.Fatal(err)
		}
		if !IsPeer(&scs) {
			t.Fatal("server does not see the client as a peer")
		}
	})
	t.Run("client without certificate is no peer", func(t *testing.T) {
		_, scs, err := handshake(t, Server(a, pool), &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		if IsPeer(&scs) {
			t.Fatal("anonymous client seen as a peer")
		}
	})
	t.Run("client from another CA", func(t *testing.T) {
		if _, _, err := handshake(t, Server(a, pool), PeerClient(rogue, pool)); err == nil {
			t.Fatal("client certificate from another CA accepted")
		}
	})
	t.Run("server from another CA", func(t *testing.T) {
		_, _, err := handshake(t, Server(rogue, nil), PeerClient(a, pool))
		if !errors.Is(err, ErrNotPeer) {
			t.Fatalf("server from another CA: %v, want ErrNotPeer", err)
		}
	})
}

func TestRegionIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "regions")
	pool := ca.Pool()
	eu := ca.IssueWith(t, "eu-1", certtest.Options{Regions: []string{"eu"}})
	if got := CertRegions(eu.Cert); !slices.Equal(got, []string{"eu"}) {
		t.Fatalf("CertRegions = %v, want [eu]", got)
	}
	if got := CertRegions(ca.Issue(t, "plain").Cert); got != nil {
		t.Fatalf("CertRegions of a certificate without regions = %v", got)
	}
	if u := RegionURI("DC_EUROPE_0").String(); u != "counterd-region://DC_EUROPE_0" {
		t.Fatalf("RegionURI = %s", u)
	}
	cf, kf := eu.Write(t, dir, "eu")
	srv, err := NewReloader(cf, kf, ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cf, kf = ca.IssueWith(t, "us-1", certtest.Options{Regions: []string{"us"}}).Write(t, dir, "us")
	cli, err := NewReloader(cf, kf, ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The server's verified view of the client names its region.
	_, scs, err := handshake(t, Server(srv, pool), PeerClient(cli, pool))
	if err != nil {
		t.Fatal(err)
	}
	if got := CertRegions(PeerLeaf(&scs)); !slices.Equal(got, []string{"us"}) {
		t.Fatalf("client regions seen by the server = %v", got)
	}
	// A checked client refuses a server its check refuses.
	errWrong := errors.New("wrong region")
	check := func(want string) func(*x509.Certificate) error {
		return func(c *x509.Certificate) error {
			if !slices.Contains(CertRegions(c), want) {
				return errWrong
			}
			return nil
		}
	}
	if _, _, err := handshake(t, Server(srv, pool), PeerClientChecked(cli, pool, check("eu"))); err != nil {
		t.Fatalf("server of the right region: %v", err)
	}
	if _, _, err := handshake(t, Server(srv, pool), PeerClientChecked(cli, pool, check("ap"))); !errors.Is(err, errWrong) {
		t.Fatalf("server of another region: %v, want the check's error", err)
	}
	if PeerLeaf(&tls.ConnectionState{}) != nil || PeerLeaf(nil) != nil {
		t.Fatal("PeerLeaf without a verified chain")
	}
}

func TestReloaderCheck(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "regions")
	euOnly := func(c *x509.Certificate) error {
		if !slices.Contains(CertRegions(c), "eu") {
			return errors.New("not region eu")
		}
		return nil
	}
	cf, kf := ca.Issue(t, "plain").Write(t, dir, "n")
	if _, err := NewReloader(cf, kf, ReloaderOptions{Check: euOnly}); err == nil || !strings.Contains(err.Error(), "not region eu") {
		t.Fatalf("NewReloader with a certificate the check refuses: %v", err)
	}
	ca.IssueWith(t, "first", certtest.Options{Regions: []string{"eu"}}).Write(t, dir, "n")
	r, err := NewReloader(cf, kf, ReloaderOptions{Check: euOnly, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// A rotation to a refused certificate keeps the previous one.
	ca.IssueWith(t, "other-region", certtest.Options{Regions: []string{"us"}}).Write(t, dir, "n")
	if changed, err := r.Reload(); changed || err == nil {
		t.Fatalf("reload to a refused certificate: changed %v, err %v", changed, err)
	}
	if cn := r.Certificate().Leaf.Subject.CommonName; cn != "first" {
		t.Fatalf("serving %q after a refused reload, want first", cn)
	}
	ca.IssueWith(t, "second", certtest.Options{Regions: []string{"eu"}}).Write(t, dir, "n")
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("reload to an accepted certificate: changed %v, err %v", changed, err)
	}
	if cn := r.Certificate().Leaf.Subject.CommonName; cn != "second" {
		t.Fatalf("serving %q, want second", cn)
	}
}

func TestParseGossipKey(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		key := bytes.Repeat([]byte{0xfe}, n) // not base64
		if got, err := ParseGossipKey(key); err != nil || !bytes.Equal(got, key) {
			t.Fatalf("raw %d bytes: %x, %v", n, got, err)
		}
		enc := base64.StdEncoding.EncodeToString(key) + "\n"
		if got, err := ParseGossipKey([]byte(enc)); err != nil || !bytes.Equal(got, key) {
			t.Fatalf("base64 of %d bytes: %x, %v", n, got, err)
		}
	}
	for _, bad := range []string{"", "short", base64.StdEncoding.EncodeToString(make([]byte, 20)), string(make([]byte, 33))} {
		if _, err := ParseGossipKey([]byte(bad)); !errors.Is(err, ErrGossipKey) {
			t.Fatalf("%q: %v, want ErrGossipKey", bad, err)
		}
	}
}

// Any input either fails with ErrGossipKey or yields a usable AES key, and
// the base64 form of any valid key decodes back to it.
func TestParseGossipKeyProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "in")
		k, err := ParseGossipKey(in)
		if err != nil {
			if !errors.Is(err, ErrGossipKey) {
				t.Fatalf("error %v is not ErrGossipKey", err)
			}
		} else if !validKeyLen(len(k)) {
			t.Fatalf("key of %d bytes", len(k))
		}
		key := rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "key")[:rapid.SampledFrom([]int{16, 24, 32}).Draw(t, "n")]
		got, err := ParseGossipKey([]byte(" " + base64.StdEncoding.EncodeToString(key) + "\n"))
		if err != nil || !bytes.Equal(got, key) {
			t.Fatalf("base64 round trip: %x, %v; want %x", got, err, key)
		}
	})
}

// TestCAFileReload: configurations built on a CAFile verify new
// handshakes, both ways, against the pool of the last Reload.
func TestCAFileReload(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := certtest.NewCA(t, "first"), certtest.NewCA(t, "second")
	reloader := func(ca *certtest.CA, name string) *Reloader {
		cf, kf := ca.Issue(t, name).Write(t, dir, name)
		r, err := NewReloader(cf, kf, ReloaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	srv1, cli1, cli2 := reloader(ca1, "srv1"), reloader(ca1, "cli1"), reloader(ca2, "cli2")
	path := filepath.Join(dir, "peer-ca.pem")
	write := func(pems ...[]byte) {
		if err := os.WriteFile(path, bytes.Join(pems, nil), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca1.PEM)
	f, err := LoadCAFile(path)
	if err != nil {
		t.Fatal(err)
	}
	server := ServerRoots(srv1, f.Pool)
	client := func(r *Reloader) *tls.Config { return PeerClientRoots(r, f.Pool, nil) }
	if _, _, err := handshake(t, server, client(cli1)); err != nil {
		t.Fatalf("client of the CA: %v", err)
	}
	if _, _, err := handshake(t, server, client(cli2)); err == nil {
		t.Fatal("client of another CA accepted")
	}
	write(ca1.PEM, ca2.PEM) // a CA rotation: both
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	_, scs, err := handshake(t, server, client(cli2))
	if err != nil || !IsPeer(&scs) || PeerLeaf(&scs).Subject.CommonName != "cli2" {
		t.Fatalf("client of the added CA: %v (peer %v)", err, IsPeer(&scs))
	}
	write(ca2.PEM) // the old CA retired
	if _, err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := handshake(t, server, client(cli1)); err == nil {
		t.Fatal("client of the retired CA accepted")
	}
	// The client side too: a server of the retired CA is refused.
	if _, _, err := handshake(t, Server(srv1, nil), client(cli2)); !errors.Is(err, ErrNotPeer) {
		t.Fatalf("server of the retired CA: %v, want ErrNotPeer", err)
	}
	// A broken file keeps the previous pool.
	write([]byte("not PEM"))
	if changed, err := f.Reload(); changed || !errors.Is(err, ErrNoCertificates) {
		t.Fatalf("Reload of a broken file: %v, %v", changed, err)
	}
	if _, _, err := handshake(t, ServerRoots(reloader(ca2, "srv2"), f.Pool), client(cli2)); err != nil {
		t.Fatalf("after a broken reload: %v", err)
	}
}
