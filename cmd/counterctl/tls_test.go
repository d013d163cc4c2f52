package main

import (
	"crypto/tls"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

// startTLSServer serves the real HTTP API over TLS with a certificate from
// a fresh CA and returns its https URL and the CA file.
func startTLSServer(t *testing.T) (url, caFile string) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ca := certtest.NewCA(t, "counterctl test CA")
	srv := httptest.NewUnstartedServer(httpapi.New(engine.Local(eng), httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server").TLS(t)}}
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return srv.URL, ca.WriteCA(t, t.TempDir(), "ca.pem")
}

func TestCAFlag(t *testing.T) {
	addr, caFile := startTLSServer(t)
	if !strings.HasPrefix(addr, "https://") {
		t.Fatalf("server URL %q", addr)
	}
	wantOut(t, ok(t, addr, "--ca", caFile, "incr", "tls", "2"), "2\n")
	// Benchmarks use a transport of their own: it trusts --ca too.
	wantMatch(t, ok(t, addr, "--ca", caFile, "bench", "--requests", "20", "--concurrency", "2", "--prefix", "tlsb:", "--no-progress"), `(?m)^errors:\s+0$`)

	// Without the CA the server is not trusted.
	code, _, errOut := ctl(t, addr, "get", "tls")
	if code == 0 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("without --ca: exit %d, stderr %q", code, errOut)
	}
	// COUNTERD_CA is the same as --ca.
	t.Setenv("COUNTERD_CA", caFile)
	wantMatch(t, ok(t, addr, "get", "tls"), `^tls  2  `)

	// A CA file that is missing or holds no certificate is a usage error.
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, empty + ".missing"} {
		if code, _, errOut := ctl(t, addr, "--ca", f, "get", "tls"); code != 2 {
			t.Fatalf("--ca %s: exit %d, stderr %q", f, code, errOut)
		}
	}
}
