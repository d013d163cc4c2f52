package client_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/certtest"
)

func TestHTTPSWithPrivateCA(t *testing.T) {
	ca := certtest.NewCA(t, "client test CA")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok","id":"c","kind":"counter","value":7,"version":1}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server").TLS(t)}}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir, "ca.pem")

	c, err := client.New(srv.URL, client.WithCAFile(caFile), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), "c"); err != nil || v.Value != 7 {
		t.Fatalf("Get over https with WithCAFile = %+v, %v", v, err)
	}
	c, err = client.New(srv.URL, client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), "c"); err != nil {
		t.Fatalf("Get over https with WithTLSConfig: %v", err)
	}
	c, err = client.New(srv.URL, client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), "c"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Get without the CA: %v, want a certificate error", err)
	}

	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(srv.URL, client.WithCAFile(empty)); !errors.Is(err, client.ErrNoCA) {
		t.Fatalf("CA file without a certificate: %v, want ErrNoCA", err)
	}
	if _, err := client.New(srv.URL, client.WithCAFile(empty+".missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing CA file: %v", err)
	}
}
