package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/httpjson"
	"github.com/counterd/counterd/internal/rollup"
)

var bg = context.Background()

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClockServer(t *testing.T, clk *testClock) *testServer {
	t.Helper()
	eng := openEngine(t, func(c *engine.Config) { c.Clock = clk.Now })
	h := New(engine.Local(eng), Options{Logger: quietLogger()})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{t: t, srv: srv, eng: eng, h: h}
}

func TestRollupSpecRoutes(t *testing.T) {
	clk := &testClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	s := newClockServer(t, clk)
	s.fail(http.StatusNotFound, httpjson.CodeNotFound, "GET", "/rollups/page_views", "")
	a := s.ok("PUT", "/rollups/page_views", `{"minute": "2d", "hour": "30d", "month": "0", "precision": 12}`)
	want := `{"key":"page_views","rollup":{"minute":"2d","hour":"30d","day":"400d","month":"0","unique_hours":"2d","unique_days":"400d","precision":12,"std_error":0.01625},"status":"ok"}`
	if string(a.Raw) != want+"\n" {
		t.Fatalf("PUT answer:\n%s\nwant\n%s", a.Raw, want)
	}
	if a := s.ok("GET", "/rollups/page_views", ""); a.Body["key"] != "page_views" {
		t.Fatalf("GET: %s", a.Raw)
	}
	s.ok("PUT", "/rollups/likes:article_1", `{}`) // one id, defaults
	a = s.ok("GET", "/rollups", "")
	var list rollupsAnswer
	if err := json.Unmarshal(a.Raw, &list); err != nil || len(list.Rollups) != 2 || list.Rollups["likes:article_1"].Minute != "2d" {
		t.Fatalf("list: %s %v", a.Raw, err)
	}
	for _, tc := range []struct {
		body, code string
	}{
		{`{"minute": "soon"}`, httpjson.CodeInvalidArgument},
		{`{"minute": "-1h"}`, httpjson.CodeInvalidArgument},
		{`{"hour": "30s"}`, httpjson.CodeInvalidArgument}, // shorter than a bucket
		{`{"unique_days": "500d"}`, httpjson.CodeInvalidArgument},
		{`{"precision": 9}`, httpjson.CodeInvalidArgument},
		{`{"precision": 14.5}`, httpjson.CodeInvalidArgument},
		{`{"minute": 60}`, httpjson.CodeInvalidArgument},
		{`{"weeks": "1"}`, httpjson.CodeInvalidJSON},
		{`[]`, httpjson.CodeInvalidArgument},
	} {
		s.fail(http.StatusBadRequest, tc.code, "PUT", "/rollups/x", tc.body)
	}
	s.fail(http.StatusBadRequest, httpjson.CodeInvalidID, "PUT", "/rollups/a%01b", `{}`)
	if a := s.ok("DELETE", "/rollups/page_views", ""); a.Body["deleted"] != true {
		t.Fatalf("DELETE: %s", a.Raw)
	}
	if a := s.ok("DELETE", "/rollups/page_views", ""); a.Body["deleted"] != false {
		t.Fatalf("second DELETE: %s", a.Raw)
	}
	s.fail(http.StatusMethodNotAllowed, httpjson.CodeMethodNotAllowed, "POST", "/rollups/x", `{}`)
}

func TestSeriesRoute(t *testing.T) {
	t0 := time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)
	clk := &testClock{t: t0}
	s := newClockServer(t, clk)
	s.ok("PUT", "/rollups/page_views", `{"minute": "2d"}`)
	for m := range 90 {
		s.ok("POST", "/counters/page_views:article_123/increment", fmt.Sprintf(`{"delta": %d}`, m%5))
		clk.Advance(time.Minute)
	}
	// The seed's query: 10:00 .. 10:02 of minutes.
	a := s.ok("GET", "/counters/page_views:article_123/series?granularity=minute&from=2024-01-08T10:00:00Z&to=2024-01-08T10:03:00Z", "")
	want := `{"id":"page_views:article_123","granularity":"minute","source":"minute","from":"2024-01-08T10:00:00.000Z","to":"2024-01-08T10:03:00.000Z","total":3,"buckets":[{"start":"2024-01-08T10:00:00.000Z","count":0},{"start":"2024-01-08T10:01:00.000Z","count":1},{"start":"2024-01-08T10:02:00.000Z","count":2}]}`
	if string(a.Raw) != want+"\n" {
		t.Fatalf("series:\n%s\nwant\n%s", a.Raw, want)
	}
	a = s.ok("GET", "/counters/page_views:article_123/series?granularity=hour&from=-3h&to=now", "")
	if a.num(t, "total") != 180 || len(a.Body["buckets"].([]any)) != 4 {
		t.Fatalf("hours: %s", a.Raw)
	}
	// Unix seconds, and the default: the last 60 buckets.
	a = s.ok("GET", fmt.Sprintf("/counters/page_views:article_123/series?granularity=day&from=%d", t0.Unix()), "")
	if a.num(t, "total") != 180 || a.Body["source"] != "day" {
		t.Fatalf("days: %s", a.Raw)
	}
	a = s.ok("GET", "/counters/page_views:article_123/series", "")
	if a.Body["granularity"] != "hour" || len(a.Body["buckets"].([]any)) != 60 || a.num(t, "total") != 180 {
		t.Fatalf("default series: %s", a.Raw)
	}
	a = s.ok("GET", "/counters/page_views:missing/series?granularity=minute&from=-10m", "")
	if a.num(t, "total") != 0 || len(a.Body["buckets"].([]any)) != 10 {
		t.Fatalf("missing counter: %s", a.Raw)
	}
	s.ok("POST", "/counters/other/increment", "{}")
	s.ok("POST", "/counters/page_views:u/pfadd", `{"items": ["a"]}`)
	for _, tc := range []struct {
		status int
		code   string
		path   string
	}{
		{400, httpjson.CodeInvalidArgument, "/counters/page_views:article_123/series?granularity=week"},
		{400, httpjson.CodeInvalidArgument, "/counters/page_views:article_123/series?from=yesterday"},
		{400, httpjson.CodeInvalidArgument, "/counters/page_views:article_123/series?from=now&to=-1h"},
		{400, httpjson.CodeInvalidArgument, "/counters/page_views:article_123/series?granularity=minute&from=-100d"},
		{400, httpjson.CodeInvalidArgument, "/counters/page_views:article_123/series?from=99999999999999"},
		{404, httpjson.CodeNotFound, "/counters/other/series"},
		{409, httpjson.CodeWrongKind, "/counters/page_views:u/series"},
	} {
		s.fail(tc.status, tc.code, "GET", tc.path, "")
	}
}

func TestUniquesRoute(t *testing.T) {
	clk := &testClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	s := newClockServer(t, clk)
	s.ok("PUT", "/rollups/visitors", `{"unique_days": "30d"}`)
	for d := range 10 {
		s.ok("POST", "/counters/visitors:article_123/pfadd", fmt.Sprintf(`{"items": ["u%d", "u%d", "shared"]}`, 2*d, 2*d+1))
		clk.Advance(24 * time.Hour)
	}
	s.ok("POST", "/counters/visitors:article_123/pfadd", `{"items": ["today"]}`)
	a := s.ok("GET", "/counters/visitors:article_123/uniques?last=7d", "")
	// Days 4..9 (12 users + shared) and today.
	if a.num(t, "value") != 14 || a.Body["last"] != "7d" || a.Body["from"] != "2024-01-12T00:00:00.000Z" || a.Body["to"] != "2024-01-19T00:00:00.000Z" {
		t.Fatalf("last 7 days: %s", a.Raw)
	}
	if a.num(t, "precision") != 14 || a.num(t, "low") > 14 || a.num(t, "high") < 14 || a.num(t, "sketches") < 1 {
		t.Fatalf("bounds: %s", a.Raw)
	}
	if v := s.ok("GET", "/counters/visitors:article_123/uniques?last=30d", "").num(t, "value"); v != 22 {
		t.Fatalf("last 30 days: %d", v)
	}
	if v := s.ok("GET", "/counters/visitors:article_123/uniques", "").num(t, "value"); v != 1 {
		t.Fatalf("default (today): %d", v)
	}
	if v := s.ok("GET", "/counters/visitors:article_123/uniques?last=24h", "").num(t, "value"); v != 1 {
		t.Fatalf("last 24 hours: %d", v)
	}
	for _, tc := range []struct {
		status int
		code   string
		query  string
	}{
		{400, httpjson.CodeInvalidArgument, "last=31d"},
		{400, httpjson.CodeInvalidArgument, "last=0d"},
		{400, httpjson.CodeInvalidArgument, "last=7w"},
		{400, httpjson.CodeInvalidArgument, "last=+7d"},
		{400, httpjson.CodeInvalidArgument, "last=d"},
		{400, httpjson.CodeInvalidArgument, "last=49h"}, // unique_hours defaults to 2d
		{404, httpjson.CodeNotFound, "last=1d&x=" + "y"},
	} {
		if tc.status == 404 { // a namespace without sketches
			s.ok("PUT", "/rollups/visitors", `{"unique_days": "0", "unique_hours": "0"}`)
		}
		s.fail(tc.status, tc.code, "GET", "/counters/visitors:article_123/uniques?"+tc.query, "")
	}
}

// FuzzRollupRoutes sends arbitrary query strings to the series and uniques
// routes and arbitrary bodies to PUT /rollups: every answer is a JSON 200 or
// 4xx, never a 500.
func FuzzRollupRoutes(f *testing.F) {
	for _, s := range []string{
		"granularity=minute&from=2024-01-08T10:00:00Z&to=2024-01-08T10:03:00Z",
		"from=-30d&to=now", "from=1704708000", "last=7d", "last=24h", "last=400d",
		`{"minute": "2d", "precision": 12}`, `{"unique_days": "0"}`,
	} {
		f.Add(s)
	}
	clk := &testClock{t: time.Date(2024, 1, 8, 10, 0, 0, 0, time.UTC)}
	eng := openEngine(f, func(c *engine.Config) {
		c.Clock = clk.Now
		c.Rollups = map[string]rollup.Spec{"p": rollup.DefaultSpec()}
	})
	h := New(engine.Local(eng), Options{Logger: quietLogger()})
	if _, err := eng.Add(bg, "p:a", 1, contract.WriteOptions{}); err != nil {
		f.Fatal(err)
	}
	if _, err := eng.Apply(bg, contract.Op{Type: contract.OpPFAdd, ID: "p:u", Items: [][]byte{[]byte("x")}}, contract.WriteOptions{}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		withQuery := func(path string) *http.Request {
			r := httptest.NewRequest("GET", path, nil)
			r.URL.RawQuery = s
			return r
		}
		for _, req := range []*http.Request{
			withQuery("/counters/p:a/series"),
			withQuery("/counters/p:u/uniques"),
			httptest.NewRequest("PUT", "/rollups/q", strings.NewReader(s)),
		} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code >= 500 || !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s %s: %d %s", req.Method, req.URL, w.Code, w.Body)
			}
		}
	})
}
