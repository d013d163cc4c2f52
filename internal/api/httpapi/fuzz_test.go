package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/engine"
)

// fuzzWatched are counters the fuzz bodies are likely to name.
var fuzzWatched = []string{"a", "b", "f", "h", "max", "p", "w"}

// fuzzEnv is one engine and handler shared by the iterations of a fuzz
// target (opening an engine per input would dominate the run time).
type fuzzEnv struct {
	eng *engine.Engine
	h   *Handler
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	// A frozen clock: no TTL set by an earlier input expires between the
	// two state reads of a later one.
	now := time.Now()
	eng := openEngine(f, func(c *engine.Config) { c.Clock = func() time.Time { return now } })
	// A small body limit keeps the 413 path reachable by the fuzzer.
	h := New(engine.Local(eng), Options{Logger: quietLogger(), MaxBodyBytes: 4 << 10, MaxBatch: 8})
	env := &fuzzEnv{eng: eng, h: h}
	for _, body := range []struct{ path, body string }{
		{"/counters/max", fmt.Sprintf(`{"value": %d}`, int64(math.MaxInt64))},
		{"/counters/a", `{"value": 1}`},
	} {
		if code, raw := env.serve("PUT", body.path, []byte(body.body)); code != 200 {
			f.Fatalf("seeding %s: %d %s", body.path, code, raw)
		}
	}
	if code, raw := env.serve("POST", "/counters/h/hincr", []byte(`{"fields": {"x": 1}}`)); code != 200 {
		f.Fatalf("seeding h: %d %s", code, raw)
	}
	return env
}

func (env *fuzzEnv) serve(method, path string, body []byte) (int, []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	env.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// state is what a failed request must leave unchanged: every counter's
// kind, value and version (or only the watched ones once there are many).
// contract.Stats().Ops is not part of it: the engine counts the ops of a
// batch that failed and was rolled back.
func (env *fuzzEnv) state(t *testing.T) string {
	var b strings.Builder
	fmt.Fprintf(&b, "keys=%d", env.eng.Len())
	ids := fuzzWatched
	if env.eng.Len() <= 500 {
		ids = nil
		for cursor := uint64(0); ; {
			var page []string
			page, cursor = env.eng.Scan(cursor, "", 1000)
			ids = append(ids, page...)
			if cursor == 0 {
				break
			}
		}
		sort.Strings(ids)
	}
	for _, id := range ids {
		v, err := env.eng.Get(id)
		if err != nil {
			t.Fatalf("Get(%q): %v", id, err)
		}
		fmt.Fprintf(&b, " %q=%s/%d/%s/%d", id, v.Kind, v.Value, v.Float, v.Version)
	}
	return b.String()
}

// check POSTs body to path and checks the invariants: never 5xx, always a
// JSON answer, and state changes only on 200.
func (env *fuzzEnv) check(t *testing.T, path string, body []byte) {
	before := env.state(t)
	code, raw := env.serve("POST", path, body)
	if code >= 500 {
		t.Fatalf("POST %s %q: %d %s", path, body, code, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("POST %s %q: answer is not a JSON object: %q", path, body, raw)
	}
	if code == http.StatusOK {
		if m["status"] != "ok" {
			t.Fatalf("POST %s %q: 200 with %s", path, body, raw)
		}
		return
	}
	checkError(t, code, raw, code, fmt.Sprint(m["error"].(map[string]any)["code"]))
	if after := env.state(t); after != before {
		t.Fatalf("POST %s %q answered %d %s but changed state:\n before %s\n after  %s", path, body, code, raw, before, after)
	}
}

func FuzzIncrement(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"delta": 1}`, `{"delta": -1}`, `{"delta": 1.5}`, `{"delta": "1"}`, `{"delta": 1e3}`,
		`{"delta": 9223372036854775807}`, `{"delta": -9223372036854775808}`, `{"delta": 1} x`,
		`{"kind": "window", "granularity": "1s", "window": "10s"}`, `{"kind": "sharded", "shards": 3}`,
		`{"kind": "pn"}`, `{"kind": "hll"}`, `{"detla": 1}`, `[1]`, `null`, `{"delta": 1}{}`,
		`{"delta":1,"delta":2}`, `{"DELTA": 1}`, `{"shards": 100000}`, `{"granularity": "-1s", "window": "1s"}`,
		`{"kind": "float", "delta": 0.1}`, `{"kind": "float", "delta": "0x1p3"}`, `{"kind": "float", "delta": "inf"}`,
		`{"kind": "float", "delta": 1e4932}`, `{"kind": "float", "delta": "nan"}`, `{"kind": "float"}`,
	} {
		f.Add(uint8(0), []byte(s))
	}
	env := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ids := []string{"a", "max", "h", "f"}
		id := ids[int(which)%len(ids)]
		if which&4 != 0 {
			env.check(t, "/counters/"+id+"/decrement", body)
		} else {
			env.check(t, "/counters/"+id+"/increment", body)
		}
	})
}

func FuzzBatch(f *testing.F) {
	for _, s := range []string{
		`{"ops": []}`, `{"ops": [{"op": "increment", "id": "a"}]}`,
		`{"ops": [{"op": "increment", "id": "a", "delta": 2}, {"op": "increment", "id": "max"}]}`,
		`{"ops": [{"op": "set", "id": "b", "value": 3, "expected_version": 0}]}`,
		`{"ops": [{"op": "hincr", "id": "h", "fields": {"x": 1}}, {"op": "pfadd", "id": "h", "items": ["x"]}]}`,
		`{"ops": [{"op": "pfadd", "id": "p", "items": ["x", "y"]}, {"op": "pfmerge", "id": "p", "sources": ["a"]}]}`,
		`{"ops": [{"op": "expire", "id": "a", "ttl_ms": 0}, {"op": "delete", "id": "b"}]}`,
		`{"ops": [{"op": "hdel", "id": "h", "fields": ["x"]}, {"op": "decrement", "id": "w", "kind": "window"}]}`,
		`{"ops": [{"op": "increment", "id": ""}]}`, `{"ops": [{"op": "nope", "id": "a"}]}`,
		`{"ops": [{"op": "increment", "id": "f", "kind": "float", "delta": 0.5}, {"op": "decrement", "id": "f", "kind": "float", "delta": "x"}]}`,
		`{"ops": [1, 2]}`, `{"ops": {}}`, `{"ops": null}`, `{}`, `{"ops": [{"op": "delete", "id": "a", "x": 1}]}`,
	} {
		f.Add([]byte(s))
	}
	env := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		env.check(t, "/batch", body)
	})
}

// TestChunkedBodyTooLarge covers a body without Content-Length over the limit.
func TestChunkedBodyTooLarge(t *testing.T) {
	eng := openEngine(t)
	h := New(engine.Local(eng), Options{Logger: quietLogger(), MaxBodyBytes: 64})
	body := `{"delta": 1` + strings.Repeat(" ", 100) + `}`
	req := httptest.NewRequest("POST", "/counters/a/increment", strings.NewReader(body))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	checkError(t, rec.Code, rec.Body.Bytes(), 413, "body_too_large")
	if v, _ := eng.Get("a"); v.Exists {
		t.Errorf("a exists after a rejected body")
	}
}
