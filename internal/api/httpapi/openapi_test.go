package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

type openapiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Parameters map[string]openapiParam `json:"parameters"`
	} `json:"components"`
}

type openapiParam struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type openapiOp struct {
	Parameters  []openapiParam             `json:"parameters"`
	Responses   map[string]json.RawMessage `json:"responses"`
	OperationID string                     `json:"operationId"`
}

var wildcardRE = regexp.MustCompile(`\{([^{}]*)\}`)

// openapiPath converts a ServeMux pattern to an OpenAPI path template:
// both write a wildcard as {name}; a ServeMux {name...} or {$} has no
// OpenAPI form and fails the test.
func openapiPath(t *testing.T, pattern string) string {
	for _, m := range wildcardRE.FindAllStringSubmatch(pattern, -1) {
		if strings.HasSuffix(m[1], "...") || m[1] == "$" {
			t.Fatalf("pattern %q: wildcard %q has no OpenAPI form; extend openapiPath", pattern, m[0])
		}
	}
	return pattern
}

func loadOpenAPI(t *testing.T) openapiDoc {
	t.Helper()
	var doc openapiDoc
	if err := json.Unmarshal(openapiJSON, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	return doc
}

// TestOpenAPICoversRoutes fails when a registered route is missing from
// openapi.json. The document also describes the routes the server mounts
// beside this package's (rate limits, cluster, admin): internal/server's
// TestOpenAPIMatchesMountedRouter checks it against the whole router.
func TestOpenAPICoversRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	methods := map[string]bool{"get": true, "put": true, "post": true, "delete": true, "patch": true, "head": true, "options": true, "trace": true}

	registered := map[string]bool{}
	for _, rt := range routeTable() {
		key := strings.ToLower(rt.Method) + " " + openapiPath(t, rt.Pattern)
		if registered[key] {
			t.Errorf("route %s registered twice", key)
		}
		registered[key] = true
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for m := range item {
			if methods[m] {
				documented[m+" "+path] = true
			}
		}
	}
	var missing []string
	for k := range registered {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("route %s is not in openapi.json", k)
	}
}

// TestOpenAPIOperations checks each documented operation: it declares every
// path wildcard as a required path parameter, has a 200 answer, and every
// $ref in the document resolves.
func TestOpenAPIOperations(t *testing.T) {
	doc := loadOpenAPI(t)
	resolve := func(p openapiParam) openapiParam {
		if p.Ref == "" {
			return p
		}
		name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/")
		q, found := doc.Components.Parameters[name]
		if !ok || !found {
			t.Errorf("unresolved parameter %s", p.Ref)
		}
		return q
	}
	for _, rt := range routeTable() {
		path := openapiPath(t, rt.Pattern)
		item := doc.Paths[path]
		var common []openapiParam
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &common); err != nil {
				t.Fatalf("%s parameters: %v", path, err)
			}
		}
		var op openapiOp
		if err := json.Unmarshal(item[strings.ToLower(rt.Method)], &op); err != nil {
			t.Errorf("%s %s: %v", rt.Method, path, err)
			continue
		}
		if _, ok := op.Responses["200"]; !ok {
			t.Errorf("%s %s has no 200 answer", rt.Method, path)
		}
		declared := map[string]bool{}
		for _, p := range append(common, op.Parameters...) {
			p = resolve(p)
			if p.In == "path" {
				if !p.Required {
					t.Errorf("%s %s: path parameter %s not required", rt.Method, path, p.Name)
				}
				declared[p.Name] = true
			}
		}
		wild := map[string]bool{}
		for _, m := range wildcardRE.FindAllStringSubmatch(rt.Pattern, -1) {
			wild[m[1]] = true
			if !declared[m[1]] {
				t.Errorf("%s %s: wildcard {%s} is not a path parameter", rt.Method, path, m[1])
			}
		}
		for name := range declared {
			if !wild[name] {
				t.Errorf("%s %s: path parameter %s is not in the path", rt.Method, path, name)
			}
		}
	}

	// Every $ref resolves.
	var all any
	if err := json.Unmarshal(openapiJSON, &all); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !refResolves(all, ref) {
					t.Errorf("unresolved $ref %q", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(all)
}

func refResolves(root any, ref string) bool {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	cur := root
	for _, seg := range strings.Split(p, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[seg]; !ok {
			return false
		}
	}
	return true
}

// TestRouteTableRegistered checks that every route of the table is what
// the mux dispatches to.
func TestRouteTableRegistered(t *testing.T) {
	eng := openEngine(t)
	h := New(engine.Local(eng), Options{Logger: quietLogger()})
	for _, rt := range routeTable() {
		path := wildcardRE.ReplaceAllStringFunc(rt.Pattern, func(string) string { return "x*" })
		r, _ := http.NewRequest(rt.Method, path, nil)
		if _, pat := h.mux.Handler(r); pat != rt.Method+" "+rt.Pattern {
			t.Errorf("%s %s dispatches to %q", rt.Method, path, pat)
		}
	}
}

// TestOpenAPIScopeParameter: every read that takes ?scope= (it refuses
// an unknown scope by name) declares the scope query parameter, and
// every operation declaring it takes it.
func TestOpenAPIScopeParameter(t *testing.T) {
	doc := loadOpenAPI(t)
	s := newTestServer(t, Options{})
	takes := 0
	for _, rt := range routeTable() {
		if rt.Method != http.MethodGet {
			continue
		}
		var op openapiOp
		_ = json.Unmarshal(doc.Paths[openapiPath(t, rt.Pattern)]["get"], &op)
		declared := false
		for _, p := range op.Parameters {
			if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
				p = doc.Components.Parameters[name]
			}
			declared = declared || p.In == "query" && p.Name == "scope"
		}
		path := wildcardRE.ReplaceAllStringFunc(rt.Pattern, func(string) string { return "x*" })
		a := s.do(http.MethodGet, path+"?scope=nowhere", "")
		refused := a.Status == http.StatusBadRequest && strings.Contains(string(a.Raw), "scope must be")
		if refused != declared {
			t.Errorf("GET %s: refuses ?scope=nowhere: %v, declares scope: %v (%d %s)", rt.Pattern, refused, declared, a.Status, a.Raw)
		}
		if refused {
			takes++
		}
	}
	if takes < 2 {
		t.Errorf("%d reads take ?scope=, want at least GET /counters/{id} and its aggregate", takes)
	}
}

// The embedded openapi.json.gz is openapi.json, compressed: go generate
// writes it, and the binary serves what it holds.
func TestOpenAPIGzipCurrent(t *testing.T) {
	src, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(openapiJSON, src) {
		t.Fatal("openapi.json.gz is not openapi.json: run go generate ./internal/api/httpapi")
	}
}
