package httpapi

import (
	"net/http"
	"testing"
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
	s.fail(http.StatusBadRequest, codeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":"abc"}`)
	s.fail(http.StatusBadRequest, codeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":"nan"}`)
	s.fail(http.StatusUnprocessableEntity, codeOverflow, "POST", "/counters/price/increment", `{"kind":"float","delta":"inf"}`)
	s.fail(http.StatusBadRequest, codeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","delta":null}`)
	s.fail(http.StatusBadRequest, codeInvalidArgument, "POST", "/counters/price/increment", `{"kind":"float","shards":2}`)
	s.fail(http.StatusBadRequest, codeInvalidArgument, "POST", "/counters/price/increment", `{"delta":0.5}`)
	s.fail(http.StatusConflict, codeWrongKind, "POST", "/counters/price/increment", `{"delta":1,"kind":"pn"}`)
	if v := s.ok("GET", "/counters/price", ""); v.Body["value"].(interface{ String() string }).String() != "-9" || v.num(t, "version") != 5 {
		t.Fatalf("refused requests changed %s", v.Raw)
	}
	// An integral float takes integer adds (Redis INCR after INCRBYFLOAT).
	if a := s.ok("POST", "/counters/price/increment", `{"delta":2}`); a.num(t, "value") != -7 || a.Body["kind"] != "counter" {
		t.Fatalf("integer add to an integral float: %s", a.Raw)
	}
	s.ok("POST", "/counters/price/increment", `{"kind":"float","delta":0.5}`)
	s.fail(http.StatusConflict, codeWrongKind, "POST", "/counters/price/increment", `{"delta":1}`)
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
