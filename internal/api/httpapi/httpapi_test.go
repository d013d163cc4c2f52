package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/httpjson"
)

// The seed: POST /counters/page_views:article_123/increment {"delta": 1}
// answers 200 {"value": 1234568, "status": "ok"} (plus id, version, kind).
func TestIncrementSeed(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("PUT", "/counters/page_views:article_123", `{"value": 1234567}`)

	a := s.ok("POST", "/counters/page_views:article_123/increment", `{"delta": 1}`)
	if ct := a.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if got := a.num(t, "value"); got != 1234568 {
		t.Errorf("value %d, want 1234568", got)
	}
	if a.Body["status"] != "ok" {
		t.Errorf("status %v", a.Body["status"])
	}
	if a.Body["id"] != "page_views:article_123" || a.Body["kind"] != "counter" || a.num(t, "version") < 2 {
		t.Errorf("extra members wrong: %s", a.Raw)
	}
	if !strings.HasPrefix(string(a.Raw), `{"value":1234568,"status":"ok",`) {
		t.Errorf("answer does not start with the seed's members: %s", a.Raw)
	}
	// The seed is also a plain number: decoding into the seed's own shape works.
	var seed struct {
		Value  int64  `json:"value"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(a.Raw, &seed); err != nil || seed.Value != 1234568 || seed.Status != "ok" {
		t.Errorf("seed decode: %+v %v", seed, err)
	}
	// A new counter starts at 0; delta defaults to 1. An empty body is
	// refused: only a body that says so changes a counter.
	s.fail(400, "invalid_json", "POST", "/counters/fresh/increment", "")
	if v := s.ok("POST", "/counters/fresh/increment", "{}").num(t, "value"); v != 1 {
		t.Errorf("increment with {}: %d", v)
	}
}

func TestGetMissing(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("GET", "/counters/nope", "")
	if a.num(t, "value") != 0 || a.num(t, "version") != 0 || a.Body["exists"] != false || a.Body["kind"] != "none" || a.Body["id"] != "nope" {
		t.Errorf("missing counter: %s", a.Raw)
	}
	if v, ok := a.Body["updated_at"]; !ok || v != nil {
		t.Errorf("updated_at of a missing counter should be null: %s", a.Raw)
	}

	s.ok("POST", "/counters/there/increment", `{"delta": 5}`)
	a = s.ok("GET", "/counters/there", "")
	if a.num(t, "value") != 5 || a.Body["exists"] != true || a.Body["kind"] != "counter" {
		t.Errorf("existing counter: %s", a.Raw)
	}
	ts, _ := a.Body["updated_at"].(string)
	if len(ts) != len("2006-01-02T15:04:05.000Z") || !strings.HasSuffix(ts, "Z") {
		t.Errorf("updated_at %q is not RFC 3339 UTC with ms", ts)
	}
}

func TestDecrement(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("POST", "/counters/d/increment", `{"delta": 10}`)
	if v := s.ok("POST", "/counters/d/decrement", `{"delta": 3}`).num(t, "value"); v != 7 {
		t.Errorf("decrement 3: %d", v)
	}
	if v := s.ok("POST", "/counters/d/decrement", "{}").num(t, "value"); v != 6 {
		t.Errorf("decrement default: %d", v)
	}
	if v := s.ok("POST", "/counters/d/decrement", `{"delta": -4}`).num(t, "value"); v != 10 {
		t.Errorf("decrement -4: %d", v)
	}
	if v := s.ok("POST", "/counters/neg/decrement", `{"delta": 2}`).num(t, "value"); v != -2 {
		t.Errorf("decrement of a new counter: %d", v)
	}
}

func TestSetExpectedVersion(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("PUT", "/counters/v", `{"value": 10, "expected_version": 0}`)
	if a.num(t, "value") != 10 || a.Body["id"] != "v" {
		t.Fatalf("set: %s", a.Raw)
	}
	v1 := a.num(t, "version")
	s.fail(409, "version_conflict", "PUT", "/counters/v", `{"value": 20, "expected_version": 0}`)
	s.fail(409, "version_conflict", "PUT", "/counters/v", fmt.Sprintf(`{"value": 20, "expected_version": %d}`, v1+1))
	if got := s.value("v"); got != 10 {
		t.Fatalf("value after conflicts: %d", got)
	}
	a = s.ok("PUT", "/counters/v", fmt.Sprintf(`{"value": 20, "expected_version": %d}`, v1))
	if a.num(t, "value") != 20 || a.num(t, "version") <= int64(v1) {
		t.Fatalf("set at version: %s", a.Raw)
	}
	s.fail(409, "version_conflict", "PUT", "/counters/v", fmt.Sprintf(`{"value": 30, "expected_version": %d}`, v1))
	// Without expected_version the set always applies.
	s.ok("PUT", "/counters/v", `{"value": -5}`)
	if got := s.value("v"); got != -5 {
		t.Fatalf("value: %d", got)
	}
}

func TestDelete(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("PUT", "/counters/del", `{"value": 3}`)
	a := s.ok("DELETE", "/counters/del", "")
	if a.Body["deleted"] != true || a.Body["id"] != "del" {
		t.Errorf("delete: %s", a.Raw)
	}
	if a := s.ok("DELETE", "/counters/del", ""); a.Body["deleted"] != false {
		t.Errorf("second delete: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/del", ""); a.Body["exists"] != false {
		t.Errorf("get after delete: %s", a.Raw)
	}
}

func TestTTL(t *testing.T) {
	s := newTestServer(t, Options{})
	if ms := s.ok("GET", "/counters/t/ttl", "").num(t, "ttl_ms"); ms != -2 {
		t.Errorf("ttl of missing: %d", ms)
	}
	s.ok("PUT", "/counters/t", `{"value": 1}`)
	if ms := s.ok("GET", "/counters/t/ttl", "").num(t, "ttl_ms"); ms != -1 {
		t.Errorf("ttl without TTL: %d", ms)
	}
	if a := s.ok("PUT", "/counters/t/ttl", `{"ttl_ms": 60000}`); a.Body["changed"] != true || a.Body["id"] != "t" {
		t.Errorf("expire: %s", a.Raw)
	}
	if ms := s.ok("GET", "/counters/t/ttl", "").num(t, "ttl_ms"); ms <= 0 || ms > 60000 {
		t.Errorf("ttl: %d", ms)
	}
	if a := s.ok("GET", "/counters/t", ""); a.Body["expires_at"] == nil {
		t.Errorf("get with TTL lacks expires_at: %s", a.Raw)
	}
	if a := s.ok("DELETE", "/counters/t/ttl", ""); a.Body["changed"] != true {
		t.Errorf("persist: %s", a.Raw)
	}
	if ms := s.ok("GET", "/counters/t/ttl", "").num(t, "ttl_ms"); ms != -1 {
		t.Errorf("ttl after persist: %d", ms)
	}
	if a := s.ok("GET", "/counters/t", ""); a.Body["expires_at"] != nil {
		t.Errorf("get after persist has expires_at: %s", a.Raw)
	}
	// set with ttl_ms
	s.ok("PUT", "/counters/t2", `{"value": 1, "ttl_ms": 5000}`)
	if ms := s.ok("GET", "/counters/t2/ttl", "").num(t, "ttl_ms"); ms <= 0 || ms > 5000 {
		t.Errorf("ttl after set with ttl_ms: %d", ms)
	}
	s.fail(400, "invalid_argument", "PUT", "/counters/t/ttl", `{"ttl_ms": 0}`)
	s.fail(400, "invalid_argument", "PUT", "/counters/t/ttl", `{"ttl_ms": -1}`)
	s.fail(400, "invalid_argument", "PUT", "/counters/t/ttl", `{}`)
	s.fail(400, "invalid_argument", "PUT", "/counters/t/ttl", `{"ttl_ms": "1s"}`)
}

func TestHyperLogLog(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("POST", "/counters/h1/pfadd", `{"items": ["a", "b", "c"]}`)
	if a.Body["changed"] != true || a.Body["id"] != "h1" {
		t.Errorf("pfadd: %s", a.Raw)
	}
	// The contract answers the estimate; the engine must set Result.Value for OpPFAdd.
	if a.num(t, "value") != 3 {
		t.Errorf("pfadd value: %s (engine: Result.Value of OpPFAdd is not the estimate)", a.Raw)
	}
	if a := s.ok("POST", "/counters/h1/pfadd", `{"items": ["a"]}`); a.Body["changed"] != false || a.num(t, "value") != 3 {
		t.Errorf("pfadd again: %s (engine: Result.Value of OpPFAdd is not the estimate)", a.Raw)
	}
	a = s.ok("GET", "/counters/h1/pfcount", "")
	if a.num(t, "value") != 3 || a.Body["std_error"] == nil {
		t.Errorf("pfcount: %s", a.Raw)
	}
	s.ok("POST", "/counters/h2/pfadd", `{"items": ["c", "d"]}`)
	if a := s.ok("POST", "/pfcount", `{"ids": ["h1", "h2"]}`); a.num(t, "value") != 4 {
		t.Errorf("pfcount union: %s", a.Raw)
	}
	if a := s.ok("POST", "/counters/h3/pfmerge", `{"sources": ["h1", "h2"]}`); a.num(t, "value") != 4 || a.Body["id"] != "h3" {
		t.Errorf("pfmerge: %s", a.Raw)
	}
	a = s.ok("GET", "/counters/h3", "")
	if a.Body["kind"] != "hll" || a.num(t, "value") != 4 || a.Body["std_error"] == nil || a.Body["precision"] == nil {
		t.Errorf("get hll: %s", a.Raw)
	}
	s.fail(409, "wrong_kind", "POST", "/counters/h1/increment", `{}`)
	s.fail(400, "invalid_argument", "POST", "/counters/h1/pfadd", `{}`)
	s.fail(400, "invalid_argument", "POST", "/pfcount", `{"ids": []}`)
	s.fail(400, "invalid_id", "POST", "/counters/h1/pfmerge", `{"sources": [""]}`)
}

func TestHash(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("POST", "/counters/h/hincr", `{"fields": {"views": 1, "likes": 2}}`)
	if a.Body["id"] != "h" || fmt.Sprint(a.Body["fields"]) != "map[likes:2 views:1]" {
		t.Errorf("hincr: %s", a.Raw)
	}
	a = s.ok("POST", "/counters/h/hincr", `{"fields": {"views": 5}}`)
	if fmt.Sprint(a.Body["fields"]) != "map[views:6]" {
		t.Errorf("hincr again: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/h/fields", ""); fmt.Sprint(a.Body["fields"]) != "map[likes:2 views:6]" {
		t.Errorf("fields: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/h/fields/views", ""); a.num(t, "value") != 6 || a.Body["exists"] != true || a.Body["field"] != "views" {
		t.Errorf("hget: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/h/fields/nope", ""); a.num(t, "value") != 0 || a.Body["exists"] != false {
		t.Errorf("hget missing field: %s", a.Raw)
	}
	if a := s.ok("DELETE", "/counters/h/fields/likes", ""); a.Body["deleted"] != true {
		t.Errorf("hdel: %s", a.Raw)
	}
	if a := s.ok("DELETE", "/counters/h/fields/likes", ""); a.Body["deleted"] != false {
		t.Errorf("hdel again: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/h", ""); a.Body["kind"] != "hash" || fmt.Sprint(a.Body["fields"]) != "map[views:6]" {
		t.Errorf("get hash: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/missing/fields", ""); fmt.Sprint(a.Body["fields"]) != "map[]" {
		t.Errorf("fields of missing: %s", a.Raw)
	}
	s.ok("PUT", "/counters/c", `{"value": 1}`)
	s.fail(409, "wrong_kind", "GET", "/counters/c/fields", "")
	s.fail(409, "wrong_kind", "POST", "/counters/c/hincr", `{"fields": {"a": 1}}`)
	s.fail(400, "invalid_argument", "POST", "/counters/h/hincr", `{"fields": {}}`)
	s.fail(400, "invalid_argument", "POST", "/counters/h/hincr", `{"fields": {"a": true}}`)
}

func TestWindow(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("POST", "/counters/w/increment", `{"kind": "window", "granularity": "1s", "window": "300s", "delta": 5}`)
	if a.Body["kind"] != "window" || a.num(t, "value") != 5 {
		t.Fatalf("window increment: %s", a.Raw)
	}
	s.ok("POST", "/counters/w/increment", `{"delta": 2}`)
	a = s.ok("GET", "/counters/w/window", "")
	if a.num(t, "value") != 7 || a.Body["granularity"] != "1s" || a.Body["window"] != "5m0s" || a.Body["fixed"] != false {
		t.Fatalf("window: %s", a.Raw)
	}
	var w windowAnswer
	if err := json.Unmarshal(a.Raw, &w); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, b := range w.Buckets {
		sum += b.Count
		if b.Start == "" {
			t.Errorf("bucket without start: %s", a.Raw)
		}
	}
	if sum != 7 {
		t.Errorf("buckets sum to %d: %s", sum, a.Raw)
	}
	if a := s.ok("GET", "/counters/w", ""); a.Body["kind"] != "window" || a.Body["buckets"] == nil || a.Body["granularity"] != "1s" {
		t.Errorf("get window: %s", a.Raw)
	}
	s.ok("PUT", "/counters/c", `{"value": 1}`)
	s.fail(409, "wrong_kind", "GET", "/counters/c/window", "")
	s.fail(409, "wrong_kind", "POST", "/counters/w/increment", `{"kind": "counter"}`)
	s.fail(400, "invalid_argument", "POST", "/counters/w2/increment", `{"granularity": "1s"}`)
	s.fail(400, "invalid_argument", "POST", "/counters/w2/increment", `{"granularity": "1s", "window": "soon"}`)
	s.fail(400, "invalid_argument", "POST", "/counters/w2/increment", `{"kind": "counter", "granularity": "1s", "window": "1m"}`)
}

func TestShardedAndPN(t *testing.T) {
	s := newTestServer(t, Options{})
	for i := 0; i < 10; i++ {
		s.ok("POST", "/counters/sh/increment", `{"kind": "sharded", "shards": 4, "delta": 3}`)
	}
	a := s.ok("GET", "/counters/sh", "")
	shards, _ := a.Body["shards"].([]any)
	if a.Body["kind"] != "sharded" || a.num(t, "value") != 30 || len(shards) != 4 {
		t.Errorf("sharded: %s", a.Raw)
	}
	s.ok("POST", "/counters/pn/increment", `{"kind": "pn", "delta": 5}`)
	s.ok("POST", "/counters/pn/decrement", `{"delta": 2}`)
	a = s.ok("GET", "/counters/pn", "")
	reps, _ := a.Body["replicas"].([]any)
	if a.Body["kind"] != "pn" || a.num(t, "value") != 3 || len(reps) != 1 {
		t.Fatalf("pn: %s", a.Raw)
	}
	if r := reps[0].(map[string]any); r["replica"] != "test" || fmt.Sprintf("%v %v", r["p"], r["n"]) != "5 2" {
		t.Errorf("pn replica: %s", a.Raw)
	}
}

func TestAggregate(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("POST", "/counters/pv:a/increment", `{"delta": 1}`)
	s.ok("POST", "/counters/pv:b/increment", `{"delta": 2}`)
	s.ok("POST", "/counters/pv:c/increment", `{"delta": 3}`)
	s.ok("POST", "/counters/other/increment", `{"delta": 100}`)
	a := s.ok("GET", "/counters/pv:*/aggregate", "")
	if a.num(t, "value") != 6 || a.num(t, "count") != 3 || a.Body["prefix"] != "pv:" {
		t.Errorf("aggregate: %s", a.Raw)
	}
	if a := s.ok("GET", "/counters/nothing*/aggregate", ""); a.num(t, "value") != 0 || a.num(t, "count") != 0 {
		t.Errorf("empty aggregate: %s", a.Raw)
	}
	s.fail(400, "invalid_argument", "GET", "/counters/pv:/aggregate", "")
}

func TestEscapedIDs(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("POST", "/counters/a%2Fb:c%20d/increment", `{"delta": 4}`)
	if a.Body["id"] != "a/b:c d" {
		t.Fatalf("id %v", a.Body["id"])
	}
	if v := s.value("a%2Fb:c%20d"); v != 4 {
		t.Errorf("value %d", v)
	}
	// Ids that look like path tricks once unescaped are still plain ids.
	s.ok("POST", "/counters/..%2F..%2Fx%2F/increment", "{}")
	if v := s.value("..%2F..%2Fx%2F"); v != 1 {
		t.Errorf("value %d", v)
	}
	a = s.ok("GET", "/counters/a%2F*/aggregate", "")
	if a.num(t, "value") != 4 {
		t.Errorf("aggregate over an escaped prefix: %s", a.Raw)
	}
}

func TestList(t *testing.T) {
	s := newTestServer(t, Options{})
	want := map[string]bool{}
	for i := 0; i < 25; i++ {
		id := fmt.Sprintf("l:%02d", i)
		want[id] = true
		s.ok("POST", "/counters/"+id+"/increment", "{}")
	}
	for i := 0; i < 5; i++ {
		s.ok("POST", fmt.Sprintf("/counters/x:%d/increment", i), "{}")
	}
	s.ok("POST", "/counters/l*odd/increment", "{}") // glob characters in a prefix are literal

	collect := func(query string) []string {
		var got []string
		cursor := "0"
		for page := 0; ; page++ {
			if page > 1000 {
				t.Fatalf("listing %s does not end", query)
			}
			a := s.ok("GET", "/counters?"+query+"&limit=7&cursor="+cursor, "")
			var la listAnswer
			if err := json.Unmarshal(a.Raw, &la); err != nil || a.Body["ids"] == nil {
				t.Fatalf("list: %v %s", err, a.Raw)
			}
			got = append(got, la.IDs...)
			if la.Cursor == 0 {
				break
			}
			cursor = fmt.Sprint(la.Cursor)
		}
		sort.Strings(got)
		return got
	}
	got := collect("prefix=l:")
	if len(got) != 25 {
		t.Errorf("prefix l: listed %d ids: %v", len(got), got)
	}
	for _, id := range got {
		if !want[id] {
			t.Errorf("unexpected id %q", id)
		}
	}
	if got := collect("match=x:*"); len(got) != 5 {
		t.Errorf("match x:* listed %v", got)
	}
	if got := collect("prefix=l*"); fmt.Sprint(got) != "[l*odd]" {
		t.Errorf("prefix l* listed %v", got)
	}
	if got := collect("prefix=l:&match=*5"); fmt.Sprint(got) != "[l:05 l:15]" {
		t.Errorf("prefix and match listed %v", got)
	}
	if got := collect("x=1"); len(got) != 31 {
		t.Errorf("all: %d ids", len(got))
	}
	s.fail(400, "invalid_argument", "GET", "/counters?limit=0", "")
	s.fail(400, "invalid_argument", "GET", "/counters?limit=abc", "")
	s.fail(400, "invalid_argument", "GET", "/counters?cursor=-1", "")
}

// TestListSorted: without a cursor, GET /counters answers ids in byte
// order, and paging with after=next visits each once.
func TestListSorted(t *testing.T) {
	s := newTestServer(t, Options{})
	var want []string
	for _, id := range []string{"v:home", "v:b", "v:a_10", "v:a_2", "v:Z", "v:\u00e9", "v:a"} {
		s.ok("PUT", "/counters/"+url.PathEscape(id), `{"value": 1}`)
		want = append(want, id)
	}
	s.ok("PUT", "/counters/w:other", `{"value": 1}`)
	sort.Strings(want)
	var got []string
	after := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("sorted listing does not end")
		}
		a := s.ok("GET", "/counters?prefix=v:&limit=3&after="+url.QueryEscape(after), "")
		var la sortedListAnswer
		if err := json.Unmarshal(a.Raw, &la); err != nil {
			t.Fatalf("list: %v %s", err, a.Raw)
		}
		if _, ok := a.Body["cursor"]; ok {
			t.Errorf("sorted answer has a cursor: %s", a.Raw)
		}
		got = append(got, la.IDs...)
		if la.Next == "" {
			break
		}
		if la.Next != la.IDs[len(la.IDs)-1] {
			t.Errorf("next %q is not the page's last id: %s", la.Next, a.Raw)
		}
		after = la.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("sorted pages = %q, want %q", got, want)
	}
	a := s.ok("GET", "/counters?match=*:a*", "")
	if fmt.Sprint(a.Body["ids"]) != "[v:a v:a_10 v:a_2]" {
		t.Errorf("match, sorted: %s", a.Raw)
	}
	s.fail(400, "invalid_argument", "GET", "/counters?cursor=0&after=v:a", "")
}

// TestAggregateOverflowDetail: an aggregate past 64 bits is still the
// overflow error, and says how many counters it covers and their sum.
func TestAggregateOverflowDetail(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("PUT", "/counters/big:a", `{"value": 9223372036854775807}`)
	s.ok("PUT", "/counters/big:b", `{"value": 9223372036854775807}`)
	s.ok("PUT", "/counters/big:c", `{"value": 2}`)
	s.ok("POST", "/counters/big:u/pfadd", `{"items": ["x"]}`) // not additive
	a := s.fail(422, "overflow", "GET", "/counters/big:*/aggregate", "")
	var e struct {
		Error struct {
			Aggregate *httpjson.OverflowDetail `json:"aggregate"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.Raw, &e); err != nil || e.Error.Aggregate == nil {
		t.Fatalf("no aggregate detail: %v %s", err, a.Raw)
	}
	want := httpjson.OverflowDetail{Prefix: "big:", Count: 3, Sum: "18446744073709551616", Overflow: true}
	if *e.Error.Aggregate != want {
		t.Errorf("detail = %+v, want %+v", *e.Error.Aggregate, want)
	}
	// overflow=report: the same figures as a 200 answer.
	a = s.ok("GET", "/counters/big:*/aggregate?overflow=report", "")
	var got httpjson.OverflowDetail
	if err := json.Unmarshal(a.Raw, &got); err != nil || got != want {
		t.Errorf("overflow=report: %+v, %v; want %+v (%s)", got, err, want, a.Raw)
	}
	if _, ok := a.Body["value"]; ok {
		t.Errorf("overflow=report answers a value: %s", a.Raw)
	}
	s.fail(422, "overflow", "GET", "/counters/big:*/aggregate?overflow=error", "")
	s.fail(400, "invalid_argument", "GET", "/counters/big:*/aggregate?overflow=clamp", "")
	if a := s.ok("GET", "/counters/big:c*/aggregate?overflow=report", ""); a.num(t, "value") != 2 || a.num(t, "count") != 1 {
		t.Errorf("overflow=report without an overflow: %s", a.Raw)
	}
}

func TestBatch(t *testing.T) {
	s := newTestServer(t, Options{})
	a := s.ok("POST", "/batch", `{"ops": [
		{"op": "increment", "id": "a", "delta": 1},
		{"op": "set", "id": "b", "value": 3},
		{"op": "increment", "id": "a", "delta": 1},
		{"op": "decrement", "id": "b"},
		{"op": "hincr", "id": "h", "fields": {"x": 2}},
		{"op": "pfadd", "id": "p", "items": ["1", "2"]},
		{"op": "expire", "id": "b", "ttl_ms": 60000},
		{"op": "hdel", "id": "h", "field": "x"},
		{"op": "delete", "id": "nothing"},
		{"op": "pfmerge", "id": "p2", "sources": ["p"]}
	]}`)
	results, _ := a.Body["results"].([]any)
	if len(results) != 10 {
		t.Fatalf("batch: %s", a.Raw)
	}
	// Each result is the single route's answer.
	wantResults := []string{
		`{"value":1,"status":"ok","id":"a","version":`,
		`{"id":"b","value":3,`,
		`{"value":2,"status":"ok","id":"a",`,
		`{"value":2,"status":"ok","id":"b",`,
		`{"id":"h","fields":{"x":2},"status":"ok"}`,
		`{"id":"p","changed":true,"value":2,"status":"ok"}`,
		`{"id":"b","changed":true,"status":"ok"}`,
		`{"id":"h","deleted":true,"status":"ok"}`,
		`{"id":"nothing","deleted":false,"status":"ok"}`,
		`{"id":"p2","value":2,"status":"ok"}`,
	}
	var raws struct{ Results []json.RawMessage }
	if err := json.Unmarshal(a.Raw, &raws); err != nil {
		t.Fatal(err)
	}
	for i, w := range wantResults {
		if !strings.HasPrefix(string(raws.Results[i]), w) {
			t.Errorf("result %d = %s, want prefix %s", i, raws.Results[i], w) // result 5: engine must set Result.Value for OpPFAdd
		}
	}
	if s.value("a") != 2 || s.value("b") != 2 {
		t.Errorf("values after batch: a=%d b=%d", s.value("a"), s.value("b"))
	}

	// All or nothing: op 2 overflows, so op 0 and 1 do not apply either.
	s.ok("PUT", "/counters/max", fmt.Sprintf(`{"value": %d}`, int64(math.MaxInt64)))
	a = s.fail(422, "overflow", "POST", "/batch", `{"ops": [
		{"op": "increment", "id": "a", "delta": 10},
		{"op": "set", "id": "b", "value": 100},
		{"op": "increment", "id": "max"}
	]}`)
	if a.num(t, "index") != 2 {
		t.Errorf("index: %s", a.Raw)
	}
	if idx := a.Body["error"].(map[string]any)["index"]; fmt.Sprint(idx) != "2" {
		t.Errorf("error.index: %s", a.Raw)
	}
	if s.value("a") != 2 || s.value("b") != 2 || s.value("max") != math.MaxInt64 {
		t.Errorf("a failed batch changed values: a=%d b=%d", s.value("a"), s.value("b"))
	}
	// A wrong kind in the middle.
	a = s.fail(409, "wrong_kind", "POST", "/batch", `{"ops": [
		{"op": "increment", "id": "a"},
		{"op": "pfadd", "id": "a", "items": ["x"]}
	]}`)
	if a.num(t, "index") != 1 || s.value("a") != 2 {
		t.Errorf("wrong kind batch: %s, a=%d", a.Raw, s.value("a"))
	}
	// Decoding errors carry the index too, and nothing applies.
	a = s.fail(400, "invalid_argument", "POST", "/batch", `{"ops": [
		{"op": "increment", "id": "a"},
		{"op": "increment", "id": "a", "delta": 1.5}
	]}`)
	if a.num(t, "index") != 1 || s.value("a") != 2 {
		t.Errorf("bad delta batch: %s", a.Raw)
	}
	a = s.fail(400, "invalid_json", "POST", "/batch", `{"ops": [{"op": "delete", "id": "a", "delta": 1}]}`)
	if a.num(t, "index") != 0 || s.value("a") != 2 {
		t.Errorf("unknown field batch: %s", a.Raw)
	}
	s.fail(400, "invalid_argument", "POST", "/batch", `{"ops": [{"op": "frobnicate", "id": "a"}]}`)
	s.fail(400, "invalid_argument", "POST", "/batch", `{"ops": [{"id": "a"}]}`)
	s.fail(400, "invalid_id", "POST", "/batch", `{"ops": [{"op": "increment", "id": ""}]}`)
	s.fail(400, "invalid_argument", "POST", "/batch", `{"ops": [7]}`)
	s.fail(400, "invalid_argument", "POST", "/batch", `{}`)
}

func TestIdempotency(t *testing.T) {
	s := newTestServer(t, Options{})
	first := s.ok("POST", "/counters/i/increment", `{"delta": 5}`, "Idempotency-Key", "key-1")
	if first.Header.Get("Idempotency-Replayed") != "" {
		t.Errorf("first answer marked replayed")
	}
	again := s.ok("POST", "/counters/i/increment", `{"delta": 5}`, "Idempotency-Key", "key-1")
	if again.Header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("retry not marked replayed")
	}
	if string(again.Raw) != string(first.Raw) {
		t.Errorf("retry answered %s, first %s", again.Raw, first.Raw)
	}
	if v := s.value("i"); v != 5 {
		t.Errorf("value %d after a retry, want 5", v)
	}
	s.fail(422, "idempotency_key_reused", "POST", "/counters/i/increment", `{"delta": 6}`, "Idempotency-Key", "key-1")
	if v := s.value("i"); v != 5 {
		t.Errorf("value %d after a reused key", v)
	}
	// Batches too.
	body := `{"ops": [{"op": "increment", "id": "i"}, {"op": "increment", "id": "j"}]}`
	b1 := s.ok("POST", "/batch", body, "Idempotency-Key", "key-2", "Counterd-Durability", "sync")
	b2 := s.ok("POST", "/batch", body, "Idempotency-Key", "key-2")
	if string(b1.Raw) != string(b2.Raw) || b2.Header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("batch retry: %s / %s", b1.Raw, b2.Raw)
	}
	if s.value("i") != 6 || s.value("j") != 1 {
		t.Errorf("batch applied twice: i=%d j=%d", s.value("i"), s.value("j"))
	}
	// Durability overrides are accepted.
	s.ok("POST", "/counters/i/increment?durability=sync", "{}")
	s.ok("POST", "/counters/i/increment?durability=async", "{}", "Counterd-Durability", "async")
}

func TestBadInput(t *testing.T) {
	s := newTestServer(t, Options{})
	s.ok("PUT", "/counters/bad", `{"value": 42}`)
	s.ok("PUT", "/counters/max", fmt.Sprintf(`{"value": %d}`, int64(math.MaxInt64)))
	s.ok("PUT", "/counters/min", fmt.Sprintf(`{"value": %d}`, int64(math.MinInt64)))
	s.ok("POST", "/counters/hash/hincr", `{"fields": {"f": 1}}`)
	s.ok("POST", "/counters/hll/pfadd", `{"items": ["a"]}`)
	watched := []string{"bad", "max", "min", "hash", "hll", "new"}
	snapshot := func() map[string]string {
		m := map[string]string{}
		for _, id := range watched {
			m[id] = string(s.ok("GET", "/counters/"+id, "").Raw)
		}
		m["#keys"] = fmt.Sprint(s.eng.Len())
		return m
	}

	long := strings.Repeat("x", 300)
	bigBody := `{"delta": 1, "kind": "counter"` + strings.Repeat(" ", DefaultMaxBodyBytes) + `}`
	var ops []string
	for i := 0; i <= DefaultMaxBatch; i++ {
		ops = append(ops, `{"op": "increment", "id": "new"}`)
	}
	bigBatch := `{"ops": [` + strings.Join(ops, ",") + `]}`

	cases := []struct {
		name         string
		method, path string
		body         string
		hdrs         []string
		status       int
		code         string
	}{
		{"malformed JSON", "POST", "/counters/bad/increment", `{"delta": `, nil, 400, "invalid_json"},
		{"malformed JSON 2", "POST", "/counters/bad/increment", `{delta: 1}`, nil, 400, "invalid_json"},
		{"not JSON", "POST", "/counters/bad/increment", `delta=1`, nil, 400, "invalid_json"},
		{"unknown field", "POST", "/counters/bad/increment", `{"delta": 1, "detla": 1}`, nil, 400, "invalid_json"},
		{"trailing garbage", "POST", "/counters/bad/increment", `{"delta": 1} x`, nil, 400, "invalid_json"},
		{"trailing object", "POST", "/counters/bad/increment", `{"delta": 1}{"delta": 1}`, nil, 400, "invalid_json"},
		{"body is an array", "POST", "/counters/bad/increment", `[{"delta": 1}]`, nil, 400, "invalid_argument"},
		{"body is null", "POST", "/counters/bad/increment", `null`, nil, 400, "invalid_argument"},
		{"empty id", "POST", "/counters//increment", `{"delta": 1}`, nil, 400, "invalid_id"},
		{"empty id get", "GET", "/counters//ttl", ``, nil, 400, "invalid_id"},
		{"300-byte id", "POST", "/counters/" + long + "/increment", `{"delta": 1}`, nil, 400, "invalid_id"},
		{"control character id", "POST", "/counters/a%01b/increment", `{"delta": 1}`, nil, 400, "invalid_id"},
		{"invalid UTF-8 id", "POST", "/counters/a%FFb/increment", `{"delta": 1}`, nil, 400, "invalid_id"},
		{"overflow", "POST", "/counters/max/increment", `{"delta": 1}`, nil, 422, "overflow"},
		{"underflow", "POST", "/counters/min/decrement", `{"delta": 1}`, nil, 422, "overflow"},
		{"decrement by MinInt64", "POST", "/counters/bad/decrement", `{"delta": -9223372036854775808}`, nil, 422, "overflow"},
		{"wrong kind hincr", "POST", "/counters/bad/hincr", `{"fields": {"a": 1}}`, nil, 409, "wrong_kind"},
		{"wrong kind pfadd", "POST", "/counters/bad/pfadd", `{"items": ["a"]}`, nil, 409, "wrong_kind"},
		{"wrong kind increment hash", "POST", "/counters/hash/increment", `{}`, nil, 409, "wrong_kind"},
		{"wrong kind set hll", "PUT", "/counters/hll", `{"value": 1}`, nil, 409, "wrong_kind"},
		{"delta 1.5", "POST", "/counters/bad/increment", `{"delta": 1.5}`, nil, 400, "invalid_argument"},
		{"delta string", "POST", "/counters/bad/increment", `{"delta": "1"}`, nil, 400, "invalid_argument"},
		{"delta 1e30", "POST", "/counters/bad/increment", `{"delta": 1e30}`, nil, 400, "invalid_argument"},
		{"delta 1e3", "POST", "/counters/bad/increment", `{"delta": 1e3}`, nil, 400, "invalid_argument"},
		{"delta 1.0", "POST", "/counters/bad/increment", `{"delta": 1.0}`, nil, 400, "invalid_argument"},
		{"delta 2^63", "POST", "/counters/bad/increment", `{"delta": 9223372036854775808}`, nil, 400, "invalid_argument"},
		{"delta null", "POST", "/counters/bad/increment", `{"delta": null}`, nil, 400, "invalid_argument"},
		{"delta true", "POST", "/counters/bad/increment", `{"delta": true}`, nil, 400, "invalid_argument"},
		{"delta object", "POST", "/counters/bad/increment", `{"delta": {}}`, nil, 400, "invalid_argument"},
		{"unknown kind", "POST", "/counters/bad/increment", `{"kind": "gauge"}`, nil, 400, "invalid_argument"},
		{"shards zero", "POST", "/counters/new/increment", `{"kind": "sharded", "shards": 0}`, nil, 400, "invalid_argument"},
		{"oversized body", "POST", "/counters/bad/increment", bigBody, nil, 413, "body_too_large"},
		{"oversized batch body", "POST", "/batch", `{"ops": [` + strings.Repeat(" ", DefaultMaxBodyBytes) + `]}`, nil, 413, "body_too_large"},
		{"oversized batch", "POST", "/batch", bigBatch, nil, 413, "batch_too_large"},
		{"empty batch", "POST", "/batch", `{"ops": []}`, nil, 400, "invalid_argument"},
		{"batch op not applied", "POST", "/batch", `{"ops": [{"op": "increment", "id": "bad"}, {"op": "increment", "id": "new", "delta": "2"}]}`, nil, 400, "invalid_argument"},
		{"set without value", "PUT", "/counters/bad", `{}`, nil, 400, "invalid_argument"},
		{"set value float", "PUT", "/counters/bad", `{"value": 0.5}`, nil, 400, "invalid_argument"},
		{"set negative version", "PUT", "/counters/bad", `{"value": 1, "expected_version": -1}`, nil, 400, "invalid_argument"},
		{"set negative ttl", "PUT", "/counters/bad", `{"value": 1, "ttl_ms": -5}`, nil, 400, "invalid_argument"},
		{"set huge ttl", "PUT", "/counters/bad", `{"value": 1, "ttl_ms": 9223372036854775807}`, nil, 400, "invalid_argument"},
		{"set ttl past MaxTTL", "PUT", "/counters/bad", `{"value": 1, "ttl_ms": 9223372036854}`, nil, 400, "invalid_argument"},
		{"expire past MaxTTL", "PUT", "/counters/bad/ttl", `{"ttl_ms": 9223372036854}`, nil, 400, "invalid_argument"},
		{"version conflict", "PUT", "/counters/bad", `{"value": 1, "expected_version": 0}`, nil, 409, "version_conflict"},
		{"bad durability", "POST", "/counters/bad/increment?durability=maybe", `{}`, nil, 400, "invalid_argument"},
		{"bad durability header", "POST", "/counters/bad/increment", `{}`, []string{"Counterd-Durability", "later"}, 400, "invalid_argument"},
		{"conflicting durability", "POST", "/counters/bad/increment?durability=sync", `{}`, []string{"Counterd-Durability", "async"}, 400, "invalid_argument"},
		{"long idempotency key", "POST", "/counters/bad/increment", `{}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "invalid_argument"},
		{"binary idempotency key", "POST", "/counters/bad/increment", `{}`, []string{"Idempotency-Key", "k\xffk"}, 400, "invalid_argument"},
		{"empty idempotency key", "POST", "/counters/bad/increment", `{}`, []string{"Idempotency-Key", ""}, 400, "invalid_argument"},
		{"aggregate without star", "GET", "/counters/bad/aggregate", ``, nil, 400, "invalid_argument"},
		{"unknown route", "GET", "/nope", ``, nil, 404, "not_found"},
		{"unknown counter route", "POST", "/counters/bad/frobnicate", `{}`, nil, 404, "not_found"},
		{"trailing slash", "POST", "/counters/bad/increment/", `{}`, nil, 404, "not_found"},
		{"dot segment", "POST", "/counters/x/../bad/increment", `{}`, nil, 404, "not_found"},
		{"method not allowed", "DELETE", "/counters/bad/increment", ``, nil, 405, "method_not_allowed"},
		{"method not allowed 2", "POST", "/counters/bad", `{}`, nil, 405, "method_not_allowed"},
		{"pfmerge bad source", "POST", "/counters/hll/pfmerge", `{"sources": ["` + long + `"]}`, nil, 400, "invalid_id"},
		{"pfadd items not strings", "POST", "/counters/hll/pfadd", `{"items": [1]}`, nil, 400, "invalid_argument"},
		{"hincr field overflow", "POST", "/counters/hash/hincr", `{"fields": {"f": 9223372036854775807}}`, nil, 422, "overflow"},
		{"hincr one bad field", "POST", "/counters/hash/hincr", `{"fields": {"g": 1, "f": "abc"}}`, nil, 400, "invalid_argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot()
			a := s.do(tc.method, tc.path, tc.body, tc.hdrs...)
			checkError(t, a.Status, a.Raw, tc.status, tc.code)
			if ct := a.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			after := snapshot()
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed:\n before %s\n after  %s", k, v, after[k])
				}
			}
		})
	}
	if allow := s.do("DELETE", "/counters/bad/increment", "").Header.Get("Allow"); !strings.Contains(allow, "POST") {
		t.Errorf("405 without Allow: %q", allow)
	}
}

func TestClosedEngine(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.InMemory, cfg.NodeID, cfg.Logger = true, "test", quietLogger()
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(engine.Local(eng), Options{Logger: quietLogger()}))
	defer srv.Close()
	s := &testServer{t: t, srv: srv, eng: eng}
	s.ok("GET", "/readyz", "")
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	s.fail(503, "unavailable", "POST", "/counters/a/increment", "{}")
	s.fail(503, "unavailable", "GET", "/readyz", "")
	s.ok("GET", "/healthz", "")
}

func TestServiceRoutes(t *testing.T) {
	notReady := errors.New("warming up")
	var ready error
	s := newTestServer(t, Options{Ready: func() error { return ready }})
	if a := s.ok("GET", "/healthz", ""); string(a.Raw) != "{\"status\":\"ok\"}\n" {
		t.Errorf("healthz: %q", a.Raw)
	}
	s.ok("GET", "/readyz", "")
	var caps contract.Capabilities
	if a := s.ok("GET", "/capabilities", ""); json.Unmarshal(a.Raw, &caps) != nil ||
		caps != engine.Local(s.eng).Capabilities() || caps.Batches != contract.BatchAtomic {
		t.Errorf("capabilities: %s", a.Raw)
	}
	ready = notReady
	if a := s.fail(503, "unavailable", "GET", "/readyz", ""); !strings.Contains(string(a.Raw), "warming up") {
		t.Errorf("readyz: %s", a.Raw)
	}
	ready = nil

	a := s.ok("GET", "/openapi.json", "")
	if a.Body["openapi"] != "3.0.3" {
		t.Errorf("openapi: %.100s", a.Raw)
	}

	s.ok("POST", "/counters/m/increment", "{}")
	s.fail(400, "invalid_json", "POST", "/counters/m/increment", "{")
	a = s.do("GET", "/metrics", "")
	text := string(a.Raw)
	for _, want := range []string{
		`counterd_http_requests_total{code="200",op="increment"} 1`,
		`counterd_http_requests_total{code="400",op="increment"} 1`,
		`counterd_http_request_duration_seconds_bucket{op="increment",le="+Inf"} 2`,
		`counterd_engine_keys 1`,
		`counterd_engine_ops_total`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(text, "/counters/") {
		t.Errorf("metrics contain a raw path")
	}
}

func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	eng := openEngine(t)
	h1 := New(engine.Local(eng), Options{Registerer: reg, Logger: quietLogger()})
	h2 := New(engine.Local(eng), Options{Registerer: reg, Logger: quietLogger()})
	for _, h := range []*Handler{h1, h2} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != 200 {
			t.Fatalf("healthz %d", rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h2.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `counterd_http_requests_total{code="200",op="healthz"} 2`) {
		t.Errorf("shared registry metrics:\n%s", rec.Body.String())
	}
	if rec.Code != http.StatusOK {
		t.Errorf("metrics status %d", rec.Code)
	}
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestLogging(t *testing.T) {
	var buf lockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng := openEngine(t)
	h := New(engine.Local(eng), Options{Logger: log})
	serve := func(method, path, body string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		return rec.Code
	}
	if code := serve("POST", "/counters/a/increment", `{"delta": 2}`); code != 200 {
		t.Fatalf("increment: %d", code)
	}
	if code := serve("POST", "/counters/a/increment", `{"delta": 2.5}`); code != 400 {
		t.Fatalf("bad increment: %d", code)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if code := serve("POST", "/counters/a/increment", `{}`); code != 503 {
		t.Fatalf("closed: %d", code)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("want 3 log records, got %d:\n%s", len(lines), buf.String())
	}
	want := []struct {
		level  string
		status float64
	}{{"DEBUG", 200}, {"DEBUG", 400}, {"ERROR", 503}}
	for i, w := range want {
		if lines[i]["level"] != w.level || lines[i]["status"] != w.status || lines[i]["op"] != "increment" {
			t.Errorf("log record %d: %v", i, lines[i])
		}
	}
	if lines[1]["err"] == nil || lines[2]["err"] == nil {
		t.Errorf("error records lack err: %v", lines)
	}
}
