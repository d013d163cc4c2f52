package server

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/chunksync"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/nodestats"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ui"
)

// TestHTTPNeedsCoverRoutes: every route of the HTTP API and of the
// rate-limit API maps to a permission, and httpNeeds names no route that
// does not exist (besides the cluster, pipeline, region and snapshot routes
// mounted by Run).
func TestHTTPNeedsCoverRoutes(t *testing.T) {
	routes := append(append(httpapi.Routes(), ratelimitapi.HTTPRoutes()...), ui.Routes()...)
	for _, r := range routes {
		if _, ok := httpNeeds[r]; !ok {
			t.Errorf("route %q has no entry in httpNeeds", r)
		}
	}
	extra := append(cnode.HTTPRoutes(), "POST /events", "GET /events/dead", "GET /events/status", "GET /regions", resp.HTTPRoute, nodestats.Route)
	extra = append(extra, chunksync.Routes...)
	for pat := range httpNeeds {
		if !slices.Contains(routes, pat) && !slices.Contains(extra, pat) {
			t.Errorf("httpNeeds names %q, which is not a route", pat)
		}
	}
}

// TestGRPCNeedsCoverMethods: every method registered on the --grpc
// server for clients maps to a permission.
func TestGRPCNeedsCoverMethods(t *testing.T) {
	lim, err := ratelimit.New(ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	gs := grpc.NewServer()
	ratelimitapi.RegisterEnvoy(gs, lim, ratelimitapi.EnvoyOptions{})
	n := 0
	for svc, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			if _, ok := grpcNeeds[full]; !ok {
				t.Errorf("gRPC method %s has no entry in grpcNeeds", full)
			}
			n++
		}
	}
	if n != len(grpcNeeds) {
		t.Errorf("%d methods registered, grpcNeeds has %d entries", n, len(grpcNeeds))
	}
}

// TestProtectedModePeerLinks: a node with node-to-node links (a cluster,
// peer regions) refuses, even with --auth, a non-loopback --grpc without
// --peer-ca and a non-loopback --gossip without --gossip-key-file, and
// dialling such links beyond loopback; --insecure allows them. A node
// serving only clients keeps starting with --auth.
func TestProtectedModePeerLinks(t *testing.T) {
	mtls := func(c *Config) { c.TLSCert, c.TLSKey, c.PeerCA = "n.crt", "n.key", "ca.pem" }
	region := func(c *Config) { c.Region, c.PeerRegions = "eu", "us=127.0.0.1:9091" }
	cluster := func(c *Config) { c.Join = "127.0.0.1:7946" }
	for _, tc := range []struct {
		name     string
		edits    []func(*Config)
		wantFlag string // "" = valid
	}{
		{"loopback region, no flags", []func(*Config){region}, ""},
		{"loopback cluster, no flags", []func(*Config){cluster}, ""},
		{"client-only grpc with auth", []func(*Config){func(c *Config) { c.GRPC, c.Auth = "0.0.0.0:9090", "tokens.yaml" }}, ""},
		{"region, public grpc, auth", []func(*Config){region, func(c *Config) { c.GRPC, c.Auth = "0.0.0.0:9090", "tokens.yaml" }}, "--peer-ca"},
		{"region, public grpc, no auth", []func(*Config){region, func(c *Config) { c.GRPC = ":9090" }}, "--peer-ca"},
		{"region, public grpc, mtls", []func(*Config){region, mtls, func(c *Config) { c.GRPC, c.Auth = "0.0.0.0:9090", "tokens.yaml" }}, ""},
		{"region, public grpc, insecure", []func(*Config){region, func(c *Config) { c.GRPC, c.Insecure = "0.0.0.0:9090", true }}, ""},
		{"region dials a remote peer", []func(*Config){func(c *Config) { c.Region, c.PeerRegions, c.Auth = "eu", "us=10.1.0.1:9090", "tokens.yaml" }}, "--peer-ca"},
		{"region dials a host name", []func(*Config){func(c *Config) { c.Region, c.PeerRegions = "eu", "us=us.example:9090" }}, "--peer-ca"},
		{"region dials a remote peer, mtls", []func(*Config){mtls, func(c *Config) { c.Region, c.PeerRegions = "eu", "us=10.1.0.1:9090" }}, ""},
		{"cluster, public grpc, auth", []func(*Config){cluster, func(c *Config) { c.GRPC, c.Auth = "10.0.0.1:9090", "tokens.yaml" }}, "--peer-ca"},
		{"cluster, public gossip, auth", []func(*Config){cluster, func(c *Config) { c.Gossip, c.Auth = "0.0.0.0:7946", "tokens.yaml" }}, "--gossip-key-file"},
		{"cluster joins a remote node", []func(*Config){func(c *Config) { c.Join = "127.0.0.1:7946,10.0.0.2:7946" }}, "--gossip-key-file"},
		{"cluster, public gossip, key", []func(*Config){cluster, func(c *Config) { c.Gossip, c.GossipKeyFile = "0.0.0.0:7946", "k" }}, ""},
		{"cluster, public everything, secured", []func(*Config){cluster, mtls, func(c *Config) {
			c.Gossip, c.GRPC, c.HTTP, c.RESP, c.Join = "10.0.0.1:7946", "10.0.0.1:9090", "10.0.0.1:8080", "10.0.0.1:6380", "10.0.0.2:7946"
			c.GossipKeyFile, c.Auth = "k", "tokens.yaml"
		}}, ""},
		{"cluster, public gossip, insecure", []func(*Config){cluster, func(c *Config) { c.Gossip, c.GRPC, c.Insecure = "0.0.0.0:7946", "0.0.0.0:9090", true }}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			for _, e := range tc.edits {
				e(&c)
			}
			err := c.Validate()
			if tc.wantFlag == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrProtectedMode) || !strings.Contains(err.Error(), tc.wantFlag+" FILE") || !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("err %v: want protected mode naming %s FILE and --insecure", err, tc.wantFlag)
			}
		})
	}
}

func TestProtectedMode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*Config)
		wantFlag string // "" = valid
	}{
		{"defaults are loopback", func(*Config) {}, ""},
		{"localhost", func(c *Config) { c.HTTP = "localhost:8080" }, ""},
		{"ipv6 loopback", func(c *Config) { c.RESP = "[::1]:6380" }, ""},
		{"all interfaces http", func(c *Config) { c.HTTP = ":8080" }, "--http"},
		{"public resp", func(c *Config) { c.RESP = "0.0.0.0:6380" }, "--resp"},
		{"public grpc", func(c *Config) { c.GRPC = "10.0.0.1:9090" }, "--grpc"},
		{"host name", func(c *Config) { c.HTTP = "node1.internal:8080" }, "--http"},
		{"insecure", func(c *Config) { c.HTTP = ":8080"; c.Insecure = true }, ""},
		{"auth", func(c *Config) { c.HTTP = ":8080"; c.Auth = "tokens.yaml" }, ""},
		{"disabled resp", func(c *Config) { c.RESP = "" }, ""},
		{"public admin with pprof", func(c *Config) { c.Pprof = true; c.Admin = "0.0.0.0:6060"; c.Auth = "tokens.yaml" }, "--admin"},
		{"public admin without pprof", func(c *Config) { c.Admin = "0.0.0.0:6060" }, ""},
		{"public admin, insecure", func(c *Config) { c.Pprof = true; c.Admin = "0.0.0.0:6060"; c.Insecure = true }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.wantFlag == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrProtectedMode) || !strings.Contains(err.Error(), tc.wantFlag) ||
				!strings.Contains(err.Error(), "--auth") || !strings.Contains(err.Error(), "--insecure") {
				t.Fatalf("err %v: want protected mode naming %s, --auth and --insecure", err, tc.wantFlag)
			}
		})
	}
}
