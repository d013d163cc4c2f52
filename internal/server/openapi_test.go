package server

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/ratelimitapi"
	cnode "github.com/counterd/counterd/internal/cluster/node"
	"github.com/counterd/counterd/internal/testutil/ports"
)

// TestOpenAPIMatchesMountedRouter runs a real node in cluster mode with
// --pprof (so every router Run mounts is there: the counters API, rate
// limits, /cluster, the admin listener), loads the OpenAPI document it
// serves with kin-openapi and validates it, then checks both ways that
// the document and the mounted routes agree: every route of the mounted
// router (httpNeeds, which TestHTTPNeedsCoverRoutes keeps complete, and
// the admin routes) is documented, and every documented operation is
// served. It walks the document: each operation is sent to the running
// node and must reach a handler (not the "no route" 404 or a 405), and
// kin-openapi's router must resolve the request to that operation.
func TestOpenAPIMatchesMountedRouter(t *testing.T) {
	base, admin := startClusterNode(t)

	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("kin-openapi cannot load /openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("/openapi.json is not a valid OpenAPI document: %v", err)
	}

	// The routes Run mounts, in OpenAPI form ("METHOD /path/{name}").
	mounted := map[string]bool{}
	for pat := range httpNeeds {
		mounted[openapiRoute(pat)] = true
	}
	for _, src := range [][]string{httpapi.Routes(), ratelimitapi.HTTPRoutes(), cnode.HTTPRoutes()} {
		for _, r := range src {
			if !mounted[openapiRoute(r)] {
				t.Errorf("route %s is served but not in httpNeeds", r)
			}
		}
	}
	for _, rt := range adminRoutes {
		mounted["GET "+rt.pattern] = true
	}
	mounted["GET /debug/pprof/{profile}"] = true // the index handler serves named profiles
	mounted["POST /debug/pprof/symbol"] = true   // symbol lookups post their addresses

	documented := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+path] = op
		}
	}
	for _, k := range sortedKeys(mounted) {
		if documented[k] == nil {
			t.Errorf("route %s is mounted but not in the OpenAPI document", k)
		}
	}
	for _, k := range sortedKeys(documented) {
		if !mounted[k] {
			t.Errorf("the OpenAPI document describes %s, which is not mounted", k)
		}
	}

	// The admin routes are served on --admin: their paths name that
	// server. kin-openapi v0.133's gorillamux router carries a path's
	// servers over to the paths after it, so the router is built with
	// the admin paths on the document's main server instead.
	for path, item := range doc.Paths.Map() {
		admin := strings.HasPrefix(path, "/debug/")
		if onAdmin := len(item.Servers) == 1 && strings.HasSuffix(item.Servers[0].URL, ":6060"); admin != onAdmin {
			t.Errorf("%s: servers %v; want the admin listener exactly for /debug/ paths", path, item.Servers)
		}
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range sortedKeys(documented) {
		method, path, _ := strings.Cut(k, " ")
		concrete := fillPath(path)
		target := base
		if strings.HasPrefix(path, "/debug/") {
			target = admin
			concrete += "?seconds=1"
		}
		const routed = "http://127.0.0.1:8080" // the document's server
		// kin-openapi resolves the request to the documented operation.
		rreq, _ := http.NewRequest(method, routed+concrete, nil)
		route, _, err := router.FindRoute(rreq)
		if err != nil {
			t.Errorf("%s %s: kin-openapi finds no route: %v", method, concrete, err)
		} else if route.Operation != documented[k] {
			t.Errorf("%s %s: kin-openapi resolves it to %s %s", method, concrete, route.Method, route.Path)
		}
		// The node serves it, unless the route belongs to another mode
		// (its own tests call it there).
		if _, other := otherModeRoutes[k]; other {
			continue
		}
		req, _ := http.NewRequest(method, target+concrete, nil)
		if method == http.MethodPost || method == http.MethodPut {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, concrete, err)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if routeMissed(method, concrete, res.StatusCode, string(body)) {
			t.Errorf("%s %s is documented but not routed: %d %s", method, concrete, res.StatusCode, body)
		}
	}
	if len(documented) < 40 {
		t.Errorf("only %d operations documented", len(documented))
	}
}

// otherModeRoutes are mounted only in a mode the cluster node of
// TestOpenAPIMatchesMountedRouter is not in, with the mode, and the test
// that serves them there.
var otherModeRoutes = map[string]string{
	"GET /admin/snapshot/manifest":     "embedded mode (cmd/counterd TestRegionSnapshotRestore)",
	"GET /admin/snapshot/blobs/{hash}": "embedded mode (cmd/counterd TestRegionSnapshotRestore)",
	"POST /admin/snapshot/chunks":      "embedded mode (cmd/counterd TestRegionSnapshotRestore)",
	"POST /events":                     "--rules, --kafka or --nats (cmd/counterd TestPipeline*)",
	"GET /events/dead":                 "--rules without a stream (cmd/counterd TestPipelineEmbeddedDeadLetters)",
	"GET /events/status":               "--rules, --kafka or --nats (internal/pipeline TestEventsStatus)",
}

// openapiRoute converts a ServeMux "METHOD pattern" to "METHOD path" as
// OpenAPI writes it: "{$}" (exact match of a trailing slash) goes away.
func openapiRoute(pat string) string { return strings.ReplaceAll(pat, "{$}", "") }

var pathParamRE = regexp.MustCompile(`\{([^{}]+)\}`)

// fillPath gives each path parameter a value the route accepts.
func fillPath(path string) string {
	return pathParamRE.ReplaceAllStringFunc(path, func(m string) string {
		switch m {
		case "{profile}":
			return "heap"
		case "{field}":
			return "f"
		case "{name}":
			return "walk-policy"
		}
		return url.PathEscape("walk:a")
	})
}

// routeMissed reports whether an answer is a router's "no such route"
// (the API's and the rate-limit API's JSON 404, ServeMux's text 404) or
// a method mismatch, rather than a handler's own answer.
func routeMissed(method, path string, status int, body string) bool {
	switch {
	case status == http.StatusMethodNotAllowed:
		return true
	case status != http.StatusNotFound:
		return false
	}
	p, _, _ := strings.Cut(path, "?")
	return strings.Contains(body, "no route for") || strings.Contains(body, "not found: "+method+" "+p) ||
		strings.HasPrefix(body, "404 page not found")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// startClusterNode runs a one-node cluster (its --join names itself) with
// --pprof in this process and returns its HTTP and admin base URLs; the
// node stops when the test ends.
func startClusterNode(t *testing.T) (httpBase, adminBase string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.NodeID = "walk"
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:" + freeTCPUDPPort(t) // port 0 would clash with --http's in validation
	cfg.Gossip = "127.0.0.1:" + freeTCPUDPPort(t)
	cfg.Join = cfg.Gossip
	cfg.Pprof = true
	cfg.ShutdownTimeout = 5 * time.Second
	addrs := runNode(t, cfg, &listenCapture{addrs: map[string]string{}, ready: make(chan struct{}), need: []string{"http", "admin"}})
	return "http://" + addrs["http"], "http://" + addrs["admin"]
}

// freeTCPUDPPort returns a loopback port free for TCP and UDP (gossip
// uses both), from below the kernel's ephemeral range.
func freeTCPUDPPort(t *testing.T) string {
	t.Helper()
	p, err := ports.One()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}
