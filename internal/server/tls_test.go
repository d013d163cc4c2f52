package server

import (
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
