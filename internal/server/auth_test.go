package server

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/chunksync"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ui"
)

// TestHTTPNeedsCoverRoutes: every route of the HTTP API and of the
// rate-limit API maps to a permission, and httpNeeds names no route that
// does not exist (besides the cluster, pipeline, region and snapshot routes
// mounted by Run).
func TestHTTPNeedsCoverRoutes(t *testing.T) {
	routes := append(append(httpapi.Routes(), ratelimit.HTTPRoutes()...), ui.Routes()...)
	for _, r := range routes {
		if _, ok := httpNeeds[r]; !ok {
			t.Errorf("route %q has no entry in httpNeeds", r)
		}
	}
	extra := append(cnode.HTTPRoutes(), "POST /events", "GET /events/dead", "GET /regions")
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
	ratelimit.RegisterEnvoy(gs, lim, ratelimit.EnvoyOptions{})
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
