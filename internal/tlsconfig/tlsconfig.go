// Package tlsconfig builds counterd's TLS configurations: the server side of
// every front end (--tls-cert, --tls-key), mutual TLS between cluster peers
// and between regions (--peer-ca) and the gossip encryption key
// (--gossip-key-file).
//
// Certificates are served through a Reloader, which re-reads the certificate
// and key files when their content changes (checked at most once per
// interval, lazily on handshakes) or when Reload is called (SIGHUP). A new
// certificate applies to new handshakes only: established connections keep
// the session they negotiated. The peer CA may be a CAFile, whose Reload
// (SIGHUP) changes the CAs new handshakes are verified against.
//
// Peers are authenticated by their chain: a certificate that verifies
// against the peer CA, for both server and client use, is a cluster member,
// whatever host names it carries. Use a CA dedicated to the deployment.
// A certificate may also name regions (URI SANs counterd-region://NAME,
// CertRegions): region links accept it only as those regions, and a
// cluster node only as a member of its own region.
package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrNoCertificates is returned for a CA file without any PEM certificate.
	ErrNoCertificates = errors.New("tlsconfig: no PEM certificate in CA file")
	// ErrGossipKey is returned for a gossip key that is not 16, 24 or 32
	// bytes, raw or base64-encoded.
	ErrGossipKey = errors.New("tlsconfig: gossip key must be 16, 24 or 32 bytes (raw or base64)")
	// ErrNotPeer is returned when a peer's certificate does not verify
	// against the peer CA.
	ErrNotPeer = errors.New("tlsconfig: certificate not signed by the peer CA")
)

// DefaultReloadInterval is how often, at most, a Reloader looks at its files.
const DefaultReloadInterval = time.Second

// ReloaderOptions configures NewReloader. Zero fields take the defaults.
type ReloaderOptions struct {
	Interval time.Duration    // least time between two looks at the files; default DefaultReloadInterval; negative: every handshake
	Now      func() time.Time // default time.Now
	Logger   *slog.Logger     // reload outcomes; default slog.Default()
	// Check, when set, must accept a certificate before it is served: a
	// pair it refuses fails NewReloader and is not taken by a reload
	// (the previous certificate stays in use).
	Check func(*x509.Certificate) error
}

// Reloader serves the certificate in a pair of PEM files and follows their
// changes. It is safe for concurrent use and holds no goroutine.
type Reloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	log               *slog.Logger
	check             func(*x509.Certificate) error

	cert atomic.Pointer[tls.Certificate]
	next atomic.Int64 // unix nanoseconds of the next look at the files

	mu      sync.Mutex // guards certPEM, keyPEM, lastErr; held while reading the files
	certPEM []byte     // content of the files cert was parsed from
	keyPEM  []byte
	lastErr string // the last failed look's error, logged once
}

// NewReloader loads certFile and keyFile; it fails if they do not hold a
// matching certificate and private key.
func NewReloader(certFile, keyFile string, opts ReloaderOptions) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, interval: opts.Interval, now: opts.Now, log: opts.Logger, check: opts.Check}
	if r.interval == 0 {
		r.interval = DefaultReloadInterval
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the files now. It reports whether the certificate
// changed; on error the previous certificate stays in use.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

func (r *Reloader) reloadLocked() (bool, error) {
	r.next.Store(r.now().Add(r.interval).UnixNano())
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		return false, fmt.Errorf("tlsconfig: certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		return false, fmt.Errorf("tlsconfig: key: %w", err)
	}
	if r.cert.Load() != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Often a rotation caught between writing the two files: the
		// next look picks up the finished pair.
		return false, fmt.Errorf("tlsconfig: %s, %s: %w", r.certFile, r.keyFile, err)
	}
	if r.check != nil {
		if err := r.check(cert.Leaf); err != nil {
			return false, fmt.Errorf("tlsconfig: %s: %w", r.certFile, err)
		}
	}
	r.certPEM, r.keyPEM = certPEM, keyPEM
	r.cert.Store(&cert)
	return true, nil
}

// Certificate returns the current certificate, first re-reading the files
// if the interval has passed since the last look.
func (r *Reloader) Certificate() *tls.Certificate {
	// TryLock: a handshake never waits for another one's look.
	if r.now().UnixNano() >= r.next.Load() && r.mu.TryLock() {
		changed, err := r.reloadLocked()
		switch {
		case err != nil && err.Error() != r.lastErr:
			r.lastErr = err.Error()
			r.log.Warn("tls certificate not reloaded, keeping the previous one", "err", err)
		case err == nil:
			r.lastErr = ""
			if changed {
				r.log.Info("tls certificate reloaded", "cert", r.certFile, "not_after", r.cert.Load().Leaf.NotAfter)
			}
		}
		r.mu.Unlock()
	}
	return r.cert.Load()
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (peers).
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// LoadCAPool reads the PEM certificates in path into a new pool.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s", ErrNoCertificates, path)
	}
	return pool, nil
}

// CAFile is a pool of CA certificates read from a PEM file, re-read by
// Reload (SIGHUP): the configurations built on it verify new handshakes,
// resumed ones included, against the pool of the moment.
type CAFile struct {
	path string
	mu   sync.Mutex // guards pem; held while reading the file
	pem  []byte
	pool atomic.Pointer[x509.CertPool]
}

// LoadCAFile reads the CA file at path.
func LoadCAFile(path string) (*CAFile, error) {
	f := &CAFile{path: path}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Pool is the current pool.
func (f *CAFile) Pool() *x509.CertPool { return f.pool.Load() }

// Reload re-reads the file and reports whether it changed; on error the
// previous pool stays in use.
func (f *CAFile) Reload() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("tlsconfig: CA: %w", err)
	}
	if f.pool.Load() != nil && bytes.Equal(b, f.pem) {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return false, fmt.Errorf("%w: %s", ErrNoCertificates, f.path)
	}
	f.pem = b
	f.pool.Store(pool)
	return true, nil
}

func fixed(pool *x509.CertPool) func() *x509.CertPool {
	if pool == nil {
		return nil
	}
	return func() *x509.CertPool { return pool }
}

// Server is the server side of a front end serving r's certificate. With a
// peerCA, clients may present a certificate and one that does not verify
// against peerCA fails the handshake; IsPeer tells peers apart. Clients
// without a certificate are served as before.
func Server(r *Reloader, peerCA *x509.CertPool) *tls.Config {
	return ServerRoots(r, fixed(peerCA))
}

// ServerRoots is Server verifying client certificates against the pool
// roots returns at each handshake (nil: no client certificates).
func ServerRoots(r *Reloader, roots func() *x509.CertPool) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if roots != nil {
		// The chain is checked by VerifyConnection against the current
		// pool (ClientCAs would fix it for the config's life); it runs on
		// every handshake, resumptions included, so a connection with a
		// client certificate has one that verified.
		c.ClientAuth = tls.RequestClientCert
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			return verifyChain(cs.PeerCertificates, roots(), x509.ExtKeyUsageClientAuth)
		}
	}
	return c
}

// PeerClient is the client side of peer traffic: it presents r's
// certificate and accepts a server whose chain verifies against peerCA for
// server use, without checking host names (see the package comment).
func PeerClient(r *Reloader, peerCA *x509.CertPool) *tls.Config {
	return PeerClientChecked(r, peerCA, nil)
}

// PeerClientChecked is PeerClient that also requires check, when set, to
// accept the server's verified certificate (such as naming a region).
func PeerClientChecked(r *Reloader, peerCA *x509.CertPool, check func(*x509.Certificate) error) *tls.Config {
	return PeerClientRoots(r, fixed(peerCA), check)
}

// PeerClientRoots is PeerClientChecked verifying the server against the
// pool roots returns at each handshake.
func PeerClientRoots(r *Reloader, roots func() *x509.CertPool, check func(*x509.Certificate) error) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		GetClientCertificate: r.GetClientCertificate,
		// The chain is checked by VerifyConnection instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyChain(cs.PeerCertificates, roots(), x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			if check != nil {
				return check(cs.PeerCertificates[0])
			}
			return nil
		},
	}
}

func verifyChain(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(certs) == 0 {
		return fmt.Errorf("%w: no certificate", ErrNotPeer)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotPeer, err)
	}
	return nil
}

// RegionScheme is the URI scheme of a region name in a certificate's
// subject alternative names: counterd-region://NAME.
const RegionScheme = "counterd-region"

// RegionURI is the URI SAN naming region name (RegionScheme).
func RegionURI(name string) *url.URL { return &url.URL{Scheme: RegionScheme, Host: name} }

// CertRegions lists the regions c names: the hosts of its URI SANs with
// RegionScheme (none: a certificate of no region).
func CertRegions(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, u := range c.URIs {
		if u.Scheme == RegionScheme && u.Host != "" && u.Path == "" {
			out = append(out, u.Host)
		}
	}
	return out
}

// PeerLeaf is the verified certificate of the client of cs (IsPeer), nil
// without one.
func PeerLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if !IsPeer(cs) {
		return nil
	}
	return cs.PeerCertificates[0]
}

// IsPeer reports whether the client of cs, a connection served with
// Server or ServerRoots and a peer CA, presented a certificate (which
// verified against the peer CA, or the handshake failed).
func IsPeer(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.PeerCertificates) > 0
}

// ParseGossipKey decodes a gossip key: 16, 24 or 32 raw bytes (AES-128,
// -192, -256), or their standard base64 encoding; surrounding whitespace
// is ignored.
func ParseGossipKey(b []byte) ([]byte, error) {
	t := bytes.TrimSpace(b)
	if dec, err := base64.StdEncoding.DecodeString(string(t)); err == nil && validKeyLen(len(dec)) {
		return dec, nil
	}
	switch {
	case validKeyLen(len(b)):
		return bytes.Clone(b), nil
	case validKeyLen(len(t)):
		return bytes.Clone(t), nil
	}
	return nil, ErrGossipKey
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// LoadGossipKey reads and decodes the key in path (ParseGossipKey).
func LoadGossipKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: gossip key: %w", err)
	}
	k, err := ParseGossipKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
