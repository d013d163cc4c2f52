package httpapi

import (
	"net/http"
	"testing"

	"github.com/counterd/counterd/internal/httpjson"
)

// TestFloatCounter: float counters over HTTP take their delta as a JSON
// number or string and answer the exact text Redis INCRBYFLOAT answers.
func TestFloatCounter(t *testing.T) {
	s := newTestServer(t, Options{})
	for _, c := range []struct{ body, want string }{
		{`{"kind":"float","delta":0.1}`, "0.1"},
		{`{"kind":"float","delta":0.2}`, "0.3"},
		{`{"kind":"float","delta":"-1e1"}`, "-9.7"},
		{`{"kind":"float"}`, "-8.7"},
	} {
		a := s.ok("POST", "/counters/price/increment", c.body)
		if string(a.Body["value"].(interface{ String() string }).String()) != c.want || a.Body["kind"] != "float" {
			t.Fatalf("%s: %s, want value %s", c.body, a.Raw, c.want)
		}
	}
	a := s.ok("POST", "/counters/price/decrement", `{"kind":"float","delta":0.3}`)
	if got := a.Body["value"].(interface{ String() string }).String(); got != "-9" {
		t.Fatalf("decrement: %s", a.Raw)
	}
	v := s.ok("GET", "/counters/price", "")
	if v.Body["kind"] != "float" || v.Body["value"].(interface{ String() string }).String() != "-9" {
		t.Fatalf("get: %s", v.Raw)
	}
	// Bad input: typed errors, nothing changes.
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":"abc"}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":"nan"}`)
	s.fail(http.StatusUnprocessableEntity, httpjson.CodeOverflow, "POST", "/counters/price/increment", `{"kind":"float","delta":"inf"}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":null}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","shards":2}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/price/increment", `{"delta":0.5}`)
	s.fail(http.StatusConflict, httpjson.CodeWrongKind, "POST", "/counters/price/increment", `{"delta":1,"kind":"pn"}`)
	if v := s.ok("GET", "/counters/price", ""); v.Body["value"].(interface{ String() string }).String() != "-9" || v.num(t, "version") != 5 {
		t.Fatalf("refused requests changed %s", v.Raw)
	}
	// An integral float takes integer adds (Redis INCR after INCRBYFLOAT).
	if a := s.ok("POST", "/counters/price/increment", `{"delta":2}`); a.num(t, "value") != -7 || a.Body["kind"] != "counter" {
		t.Fatalf("integer add to an integral float: %s", a.Raw)
	}
	s.ok("POST", "/counters/price/increment", `{"kind":"float","delta":0.5}`)
	s.fail(http.StatusConflict, httpjson.CodeWrongKind, "POST", "/counters/price/increment", `{"delta":1}`)
	// Batches take float increments too.
	a = s.ok("POST", "/batch", `{"ops":[{"op":"increment","id":"b","kind":"float","delta":1.25},{"op":"increment","id":"b","kind":"float","delta":"0x1p-2"}]}`)
	if v := s.ok("GET", "/counters/b", ""); v.Body["value"].(interface{ String() string }).String() != "1.5" {
		t.Fatalf("batch: %s then %s", a.Raw, v.Raw)
	}
	// Beyond the float64 range the exact text comes as a JSON string.
	a = s.ok("POST", "/counters/huge/increment", `{"kind":"float","delta":"1e400"}`)
	if txt, ok := a.Body["value"].(string); !ok || len(txt) != 401 || txt[0] != '1' {
		t.Fatalf("huge float: %s", a.Raw)
	}
}

// TestFloatHashFields: hincr with a non-integer number or a string is
// Redis's HINCRBYFLOAT; reads answer float fields with their exact text.
func TestFloatHashFields(t *testing.T) {
	s := newTestServer(t, Options{})
	text := func(v any) string {
		if n, ok := v.(interface{ String() string }); ok {
			return n.String()
		}
		s, _ := v.(string)
		return s
	}
	a := s.ok("POST", "/counters/h/hincr", `{"fields":{"price":0.1,"n":2}}`)
	a = s.ok("POST", "/counters/h/hincr", `{"fields":{"price":"0.2"}}`)
	if f := a.Body["fields"].(map[string]any); text(f["price"]) != "0.3" {
		t.Fatalf("hincr: %s", a.Raw)
	}
	if g := s.ok("GET", "/counters/h/fields/price", ""); text(g.Body["value"]) != "0.3" || g.Body["exists"] != true {
		t.Fatalf("hget: %s", g.Raw)
	}
	if g := s.ok("GET", "/counters/h/fields/n", ""); text(g.Body["value"]) != "2" {
		t.Fatalf("hget integer: %s", g.Raw)
	}
	f := s.ok("GET", "/counters/h/fields", "").Body["fields"].(map[string]any)
	if text(f["price"]) != "0.3" || text(f["n"]) != "2" {
		t.Fatalf("fields: %v", f)
	}
	v := s.ok("GET", "/counters/h", "")
	if text(v.Body["fields"].(map[string]any)["price"]) != "0.3" {
		t.Fatalf("view: %s", v.Raw)
	}
	// 1.5 + 0.5 is the integer 2: integer adds apply again.
	s.ok("POST", "/counters/h/hincr", `{"fields":{"m":1.5}}`)
	s.ok("POST", "/counters/h/hincr", `{"fields":{"m":0.5}}`)
	if a := s.ok("POST", "/counters/h/hincr", `{"fields":{"m":1}}`); text(a.Body["fields"].(map[string]any)["m"]) != "3" {
		t.Fatalf("integer add after floats: %s", a.Raw)
	}
	// Refused, nothing changes.
	s.fail(http.StatusConflict, httpjson.CodeWrongKind, "POST", "/counters/h/hincr", `{"fields":{"price":1}}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/h/hincr", `{"fields":{"price":"abc","n":1}}`)
	s.fail(http.StatusUnprocessableEntity, httpjson.CodeOverflow, "POST", "/counters/h/hincr", `{"fields":{"price":"inf"}}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/h/hincr", `{"fields":{"price":null}}`)
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidArgument, "POST", "/counters/h/hincr", `{"fields":{"n":99999999999999999999}}`)
	if g := s.ok("GET", "/counters/h/fields", ""); text(g.Body["fields"].(map[string]any)["price"]) != "0.3" || text(g.Body["fields"].(map[string]any)["n"]) != "2" {
		t.Fatalf("refused requests changed %s", g.Raw)
	}
	// In a batch, and beyond float64 as a string.
	s.ok("POST", "/batch", `{"ops":[{"op":"hincr","id":"h2","fields":{"x":"1e400"}},{"op":"hincr","id":"h2","fields":{"y":0.25}}]}`)
	f = s.ok("GET", "/counters/h2/fields", "").Body["fields"].(map[string]any)
	if x, ok := f["x"].(string); !ok || len(x) != 401 || text(f["y"]) != "0.25" {
		t.Fatalf("batch floats: %v", f)
	}
}
