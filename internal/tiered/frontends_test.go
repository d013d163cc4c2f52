package tiered_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/api/resp"
)

// httpDo sends body to url and decodes the JSON answer.
func httpDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
}

// TestHTTPEveryKind serves the HTTP API over the tiered backend.
func testHTTPEveryKind(t *testing.T, s setup) {
	e := s.env(t, nil)
	srv := httptest.NewServer(httpapi.New(e.b, httpapi.Options{}))
	defer srv.Close()
	u := srv.URL + "/counters/"
	writes := []struct{ path, body string }{
		{"c/increment", `{"delta": 3}`},
		{"sh/increment", `{"delta": 4, "kind": "sharded"}`},
		{"pn/increment", `{"delta": -2, "kind": "pn"}`},
		{"w/increment", `{"delta": 5, "kind": "window", "granularity": "1s", "window": "60s"}`},
		{"u/pfadd", `{"items": ["a", "b", "a"]}`},
		{"h/hincr", `{"fields": {"views": 6}}`},
	}
	for _, w := range writes {
		if code, m := httpDo(t, "POST", u+w.path, w.body); code != 200 {
			t.Fatalf("POST %s: %d %v", w.path, code, m)
		}
	}
	want := map[string]float64{"c": 3, "sh": 4, "pn": -2, "w": 5, "u": 2}
	for id, v := range want {
		if code, m := httpDo(t, "GET", u+id, ""); code != 200 || m["value"] != v {
			t.Errorf("GET %s: %d %v, want value %v", id, code, m, v)
		}
	}
	if code, m := httpDo(t, "POST", u+"h/increment", `{"delta": 1}`); code != 409 {
		t.Errorf("increment a hash: %d %v, want 409", code, m)
	}
	e.flushRedis(t) // values come back from PostgreSQL
	if code, m := httpDo(t, "GET", u+"c", ""); code != 200 || m["value"] != 3.0 {
		t.Errorf("GET c after FLUSHALL: %d %v", code, m)
	}
	if code, _ := httpDo(t, "GET", srv.URL+"/readyz", ""); code != 200 {
		t.Errorf("readyz = %d", code)
	}
	if e.rd != nil && !e.rd.External() {
		e.rd.Stop(t)
		if code, m := httpDo(t, "POST", u+"c/increment", `{"delta": 1}`); code != 503 {
			t.Errorf("increment with Redis down: %d %v, want 503", code, m)
		}
		if code, _ := httpDo(t, "GET", srv.URL+"/readyz", ""); code != 503 {
			t.Errorf("readyz with Redis down = %d, want 503", code)
		}
	}
}

// TestRESPEveryKind serves the Redis protocol over the tiered backend.
func testRESPEveryKind(t *testing.T, su setup) {
	e := su.env(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.New(e.b, resp.Options{})
	go func() { _ = rs.Serve(ln) }()
	defer rs.Close()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	check := func(what string, got, want any, err error) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %v (%v), want %v", what, got, err, want)
		}
	}
	n, err := c.IncrBy(ctx, "c", 5).Result()
	check("INCRBY", n, int64(5), err)
	n, err = c.PFAdd(ctx, "u", "x", "y").Result()
	check("PFADD", n, int64(1), err)
	n, err = c.PFCount(ctx, "u").Result()
	check("PFCOUNT", n, int64(2), err)
	n, err = c.HIncrBy(ctx, "h", "likes", 2).Result()
	check("HINCRBY", n, int64(2), err)
	s, err := c.Get(ctx, "c").Result()
	check("GET", s, "5", err)
	e.flushRedis(t)
	s, err = c.Get(ctx, "c").Result()
	check("GET after FLUSHALL of the Redis tier", s, "5", err)
	hv, err := c.HGet(ctx, "h", "likes").Result()
	check("HGET after FLUSHALL", hv, "2", err)
	if err := c.Incr(ctx, "h").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Errorf("INCR a hash: %v", err)
	}
}
