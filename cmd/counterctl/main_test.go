package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/engine"
)

// startServer starts the real HTTP API over an in-memory engine and
// returns its URL.
func startServer(t *testing.T) string {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.InMemory = true
	cfg.NodeID = "test"
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(engine.Local(eng), httpapi.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return srv.URL
}

// ctl runs counterctl in-process with --addr addr and returns its exit
// status, stdout and stderr.
func ctl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"--addr", addr}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// ok runs counterctl and fails the test unless it exits 0; it returns stdout.
func ok(t *testing.T, addr string, args ...string) string {
	t.Helper()
	code, out, errOut := ctl(t, addr, args...)
	if code != 0 {
		t.Fatalf("counterctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func wantOut(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
}

func wantMatch(t *testing.T, got, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(got) {
		t.Fatalf("output %q does not match %s", got, pattern)
	}
}

func TestCounterCommands(t *testing.T) {
	addr := startServer(t)
	wantOut(t, ok(t, addr, "incr", "page:1"), "1\n")
	wantOut(t, ok(t, addr, "incr", "page:1", "5"), "6\n")
	wantOut(t, ok(t, addr, "incr", "page:1", "-2"), "4\n")
	wantOut(t, ok(t, addr, "decr", "page:1"), "3\n")
	wantOut(t, ok(t, addr, "decr", "page:1", "3"), "0\n")
	wantMatch(t, ok(t, addr, "get", "page:1"),
		`^page:1  0  \(version \d+, updated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)\n$`)
	wantOut(t, ok(t, addr, "get", "nothing"), "nothing  0  (not found)\n")

	wantMatch(t, ok(t, addr, "set", "s", "10"), `^10  \(version \d+\)\n$`)
	out := ok(t, addr, "--json", "get", "s")
	var v struct {
		Value   int64  `json:"value"`
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Value != 10 {
		t.Fatalf("get --json: %q %v", out, err)
	}
	code, _, errOut := ctl(t, addr, "set", "s", "11", "--expected-version", "999")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: version_conflict: ") {
		t.Fatalf("set with a wrong version: exit %d, stderr %q", code, errOut)
	}
	ok(t, addr, "set", "s", "11", "--expected-version", jsonNum(v.Version), "--ttl", "10s")
	wantMatch(t, ok(t, addr, "ttl", "s"), `^(10s|9\.\d+s)\n$`)
	wantMatch(t, ok(t, addr, "get", "s"), `expires `)
	wantOut(t, ok(t, addr, "persist", "s"), "OK\n")
	wantOut(t, ok(t, addr, "ttl", "s"), "no TTL\n")
	wantOut(t, ok(t, addr, "expire", "s", "1m"), "OK\n")
	wantOut(t, ok(t, addr, "expire", "missing", "1m"), "not found\n")
	wantOut(t, ok(t, addr, "del", "s"), "deleted\n")
	wantOut(t, ok(t, addr, "del", "s"), "not found\n")
	wantOut(t, ok(t, addr, "ttl", "s"), "not found\n")

	// Flags after the arguments, and the id "-" style numbers.
	wantOut(t, ok(t, addr, "incr", "neg", "-7", "--json=false"), "-7\n")
	out = ok(t, addr, "incr", "neg", "2", "--json")
	var r struct {
		ID    string `json:"id"`
		Value int64  `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID != "neg" || r.Value != -5 {
		t.Fatalf("incr --json: %q %v", out, err)
	}
	ok(t, addr, "--durability", "sync", "incr", "dur")
	wantOut(t, ok(t, addr, "incr", "dur", "--durability", "async"), "2\n")
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestErrors(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "set", "big", "9223372036854775807")
	code, out, errOut := ctl(t, addr, "incr", "big")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "counterctl: overflow: ") {
		t.Fatalf("overflow: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = ctl(t, addr, "pfadd", "big", "x")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: wrong_kind: ") {
		t.Fatalf("wrong kind: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = ctl(t, addr, "incr", "bad\x01id")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: invalid_id: ") {
		t.Fatalf("invalid id: exit %d, stderr %q", code, errOut)
	}
	// No server: an error, not a usage error.
	srv := httptest.NewServer(nil)
	dead := srv.URL
	srv.Close()
	code, _, errOut = ctl(t, dead, "--timeout", "1s", "get", "x")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: ") {
		t.Fatalf("dead server: exit %d, stderr %q", code, errOut)
	}
}

func TestUsage(t *testing.T) {
	addr := startServer(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"incr"},
		{"incr", "a", "1", "2"},
		{"incr", "a", "one"},
		{"get"},
		{"get", "a", "b"},
		{"set", "a"},
		{"set", "a", "1", "--expected-version", "x"},
		{"set", "a", "1", "--bogus"},
		{"expire", "a", "soon"},
		{"expire", "a", "-1s"},
		{"pfadd", "a"},
		{"hincr", "a"},
		{"hincr", "a", "f=x"},
		{"hincr", "a", "f", "1", "2"},
		{"bench", "--op", "delete", "--requests", "1"},
		{"bench", "--concurrency", "0", "--requests", "1"},
		{"bench", "extra"},
		{"--durability", "eventually", "incr", "a"},
		{"--nope"},
		{"help", "nope"},
		{"series"},
		{"series", "a", "b"},
		{"series", "a", "--granularity", "week"},
		{"series", "a", "--from", "yesterday"},
		{"series", "a", "--from", "-1y"},
		{"series", "a", "--to", "2024-13-01T00:00:00Z"},
		{"series", "a", "--from", "now", "--to", "-1h"},
		{"series", "a", "--width", "-1"},
		{"uniques"},
		{"uniques", "a", "b"},
		{"uniques", "a", "--last", "7w"},
		{"uniques", "a", "--last", ""},
		{"uniques", "a", "--last", "-7d"},
		{"rollup"},
		{"rollup", "frob"},
		{"rollup", "get"},
		{"rollup", "set"},
		{"rollup", "del"},
		{"rollup", "list", "x"},
		{"rollup", "get", "a", "b"},
		{"rollup", "get", "a", "--minute", "2d"},
		{"rollup", "list", "--precision", "12"},
		{"rollup", "set", "a", "--minute", "soon"},
		{"rollup", "set", "a", "--unique-days", "-1d"},
		{"rollup", "set", "a", "--precision", "9"},
		{"rollup", "set", "a", "--precision", "300"},
		{"rollup", "set", "a", "--precision", "x"},
	} {
		code, out, errOut := ctl(t, addr, args...)
		if code != 2 {
			t.Errorf("counterctl %q: exit %d, want 2 (stdout %q, stderr %q)", args, code, out, errOut)
		}
		if errOut == "" {
			t.Errorf("counterctl %q: nothing on stderr", args)
		}
	}
	// Usage errors do not reach the server.
	if out := ok(t, addr, "get", "a"); !strings.Contains(out, "not found") {
		t.Fatalf("a usage error wrote: %q", out)
	}

	out := ok(t, addr, "help")
	for _, cmd := range []string{"incr", "get", "set", "del", "pfadd", "pfcount", "hincr", "window", "series", "uniques", "rollup", "bench", "--addr"} {
		if !strings.Contains(out, cmd) {
			t.Errorf("help does not mention %s:\n%s", cmd, out)
		}
	}
	out = ok(t, addr, "set", "-h")
	if !strings.Contains(out, "usage: counterctl set ID VALUE") || !strings.Contains(out, "--expected-version") {
		t.Errorf("set -h:\n%s", out)
	}
	out = ok(t, addr, "help", "series")
	if !strings.Contains(out, "--granularity G") || !strings.Contains(out, "-30d") || !strings.Contains(out, "--width") {
		t.Errorf("help series:\n%s", out)
	}
	out = ok(t, addr, "rollup", "-h")
	if !strings.Contains(out, "usage: counterctl rollup get KEY | set KEY") || !strings.Contains(out, "--unique-days") || !strings.Contains(out, "--precision p") {
		t.Errorf("rollup -h:\n%s", out)
	}
	out = ok(t, addr, "help", "bench")
	if !strings.Contains(out, "--concurrency") || !strings.Contains(out, "--no-progress") {
		t.Errorf("help bench:\n%s", out)
	}
}

func TestHyperLogLogCommands(t *testing.T) {
	addr := startServer(t)
	wantOut(t, ok(t, addr, "pfadd", "u:1", "a", "b", "c"), "3  (changed)\n")
	wantOut(t, ok(t, addr, "pfadd", "u:1", "a"), "3  (unchanged)\n")
	ok(t, addr, "pfadd", "u:2", "c", "d")
	wantOut(t, ok(t, addr, "pfcount", "u:1"), "3  (std error 0.81%)\n")
	wantOut(t, ok(t, addr, "pfcount", "u:1", "u:2"), "4  (std error 0.81%)\n")
	wantOut(t, ok(t, addr, "pfmerge", "u:all", "u:1", "u:2"), "4\n")
	out := ok(t, addr, "--json", "pfcount", "u:all")
	var e struct {
		Value    int64   `json:"value"`
		StdError float64 `json:"std_error"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.Value != 4 || e.StdError == 0 {
		t.Fatalf("pfcount --json: %q %v", out, err)
	}
}

func TestHashCommands(t *testing.T) {
	addr := startServer(t)
	wantOut(t, ok(t, addr, "hincr", "post:1", "views"), "views  1\n")
	wantOut(t, ok(t, addr, "hincr", "post:1", "views", "4"), "views  5\n")
	wantOut(t, ok(t, addr, "hincr", "post:1", "likes=2", "views=-1"), "likes  2\nviews  4\n")
	wantOut(t, ok(t, addr, "hget", "post:1", "views"), "4\n")
	wantOut(t, ok(t, addr, "hget", "post:1", "nope"), "0\n")
	wantOut(t, ok(t, addr, "hgetall", "post:1"), "likes  2\nviews  4\n")
	wantMatch(t, ok(t, addr, "get", "post:1"), `^post:1  0  \(hash, version \d+, updated [^)]+\)\n  likes  2\n  views  4\n$`)
	out := ok(t, addr, "hgetall", "post:1", "--json")
	var h struct {
		Fields map[string]int64 `json:"fields"`
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil || h.Fields["views"] != 4 || len(h.Fields) != 2 {
		t.Fatalf("hgetall --json: %q %v", out, err)
	}
	wantOut(t, ok(t, addr, "hdel", "post:1", "likes"), "deleted\n")
	wantOut(t, ok(t, addr, "hgetall", "post:1"), "views  4\n")
}

func TestWindowCommand(t *testing.T) {
	addr := startServer(t)
	// --kind window takes the server's default window (1m x 60).
	ok(t, addr, "incr", "hits", "3", "--kind", "window")
	ok(t, addr, "incr", "hits", "2")
	out := ok(t, addr, "window", "hits")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("window output:\n%s", out)
	}
	wantMatch(t, lines[0], `^hits  sum 5  \(granularity 1m0s, window 1h0m0s, sliding\)$`)
	wantMatch(t, lines[1], `^\s*START\s+COUNT$`)
	var sum int
	for _, l := range lines[2:] {
		wantMatch(t, l, `^\s*\d{4}-\d\d-\d\dT\d\d:\d\d:00Z\s+\d+$`)
		f := strings.Fields(l)
		n, _ := json.Number(f[1]).Int64()
		sum += int(n)
	}
	if sum != 5 {
		t.Fatalf("buckets sum to %d:\n%s", sum, out)
	}
	out = ok(t, addr, "window", "hits", "--json")
	var w struct {
		Value       int64  `json:"value"`
		Granularity string `json:"granularity"`
		Buckets     []struct {
			Start string `json:"start"`
			Count int64  `json:"count"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(out), &w); err != nil || w.Value != 5 || w.Granularity != "1m0s" || len(w.Buckets) == 0 {
		t.Fatalf("window --json: %q %v", out, err)
	}

	wantOut(t, ok(t, addr, "incr", "fast", "4", "--granularity", "1s", "--window", "5m"), "4\n")
	wantOut(t, ok(t, addr, "decr", "fast", "1", "--granularity", "1s", "--window", "5m"), "3\n")
	wantMatch(t, ok(t, addr, "window", "fast"), `^fast  sum 3  \(granularity 1s, window 5m0s, sliding\)\n`)
	if code, _, _ := ctl(t, addr, "incr", "fast", "--granularity", "1s"); code != 2 {
		t.Fatalf("--granularity without --window: exit %d", code)
	}
}

func TestAggregateAndList(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "incr", "agg:a", "2")
	ok(t, addr, "incr", "agg:b", "3")
	ok(t, addr, "incr", "zzz", "9")
	wantOut(t, ok(t, addr, "aggregate", "agg:"), "5  (2 counters)\n")
	wantOut(t, ok(t, addr, "aggregate", "agg:*"), "5  (2 counters)\n")
	out := ok(t, addr, "list", "agg:")
	ids := strings.Fields(out)
	if len(ids) != 2 || !strings.Contains(out, "agg:a\n") || !strings.Contains(out, "agg:b\n") {
		t.Fatalf("list agg: = %q", out)
	}
	if ids := strings.Fields(ok(t, addr, "list")); len(ids) != 3 {
		t.Fatalf("list = %q", ids)
	}
	if ids := strings.Fields(ok(t, addr, "list", "--limit", "1")); len(ids) != 1 {
		t.Fatalf("list --limit 1 = %q", ids)
	}
	var l struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "--json", "list", "zz")), &l); err != nil || len(l.IDs) != 1 {
		t.Fatalf("list --json: %v %v", l, err)
	}
}

func TestBench(t *testing.T) {
	addr := startServer(t)
	out := ok(t, addr, "bench", "--requests", "200", "--concurrency", "4", "--no-progress")
	for _, pat := range []string{
		`(?m)^op:\s+incr \(concurrency 4, keys 1\)$`,
		`(?m)^ops:\s+200$`,
		`(?m)^errors:\s+0$`,
		`(?m)^ops/s:\s+\d+\.\d$`,
		`(?m)^p50:\s+\S+s$`,
		`(?m)^p90:\s+\S+s$`,
		`(?m)^p99:\s+\S+s$`,
		`(?m)^max:\s+\S+s$`,
	} {
		wantMatch(t, out, pat)
	}
	wantMatch(t, ok(t, addr, "get", "bench:0"), `^bench:0  200  `)

	out = ok(t, addr, "--json", "bench", "--requests", "100", "--concurrency", "3", "--keys", "5",
		"--op", "hincr", "--prefix", "h:", "--idempotent", "--durability", "sync", "--no-progress")
	var s struct {
		Op        string  `json:"op"`
		Ops       int64   `json:"ops"`
		Errors    int64   `json:"errors"`
		OpsPerSec float64 `json:"ops_per_sec"`
		P50       float64 `json:"p50_ms"`
		P99       float64 `json:"p99_ms"`
		Max       float64 `json:"max_ms"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("bench --json: %q %v", out, err)
	}
	if s.Op != "hincr" || s.Ops != 100 || s.Errors != 0 || s.OpsPerSec <= 0 || s.P50 <= 0 || s.P99 < s.P50 || s.Max < s.P99 {
		t.Fatalf("bench --json: %+v", s)
	}
	var sum int64
	for i := range 5 {
		out := ok(t, addr, "--json", "hgetall", fmt.Sprintf("h:%d", i))
		var h struct {
			Fields map[string]int64 `json:"fields"`
		}
		json.Unmarshal([]byte(out), &h)
		for _, v := range h.Fields {
			sum += v
		}
	}
	if sum != 100 {
		t.Fatalf("hincr bench added %d, want 100", sum)
	}

	for _, op := range []string{"get", "pfadd"} {
		out := ok(t, addr, "bench", "--op", op, "--requests", "20", "--concurrency", "2", "--keys", "2", "--prefix", op+":", "--no-progress")
		wantMatch(t, out, `(?m)^ops:\s+20$`)
		wantMatch(t, out, `(?m)^errors:\s+0$`)
	}
	// A duration run.
	out = ok(t, addr, "bench", "--duration", "200ms", "--concurrency", "2", "--prefix", "dur:", "--no-progress")
	wantMatch(t, out, `(?m)^errors:\s+0$`)

	// Errors are counted, not fatal: pfadd against a plain counter.
	out = ok(t, addr, "bench", "--op", "pfadd", "--requests", "10", "--concurrency", "2", "--no-progress")
	wantMatch(t, out, `(?m)^errors:\s+10$`)
	wantMatch(t, out, `(?m)^first error:\s+counterd: wrong_kind`)
}

func TestEnvAddr(t *testing.T) {
	addr := startServer(t)
	t.Setenv("COUNTERD_ADDR", addr)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"incr", "env"}, &stdout, &stderr); code != 0 || stdout.String() != "1\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

func TestSeriesCommand(t *testing.T) {
	addr := startServer(t)
	code, _, errOut := ctl(t, addr, "series", "page_views:article_123")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: not_found: ") {
		t.Fatalf("series without a rollup spec: exit %d, stderr %q", code, errOut)
	}
	ok(t, addr, "rollup", "set", "page_views", "--minute", "2d", "--hour", "30d")
	for _, n := range []string{"100", "150", "200"} {
		ok(t, addr, "incr", "page_views:article_123", n)
	}

	out := ok(t, addr, "series", "page_views:article_123", "--granularity", "minute", "--from", "-10m")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 14 {
		t.Fatalf("series output:\n%s", out)
	}
	wantMatch(t, lines[0], `^page_views:article_123  1[01] minute buckets  \d{4}-\d\d-\d\dT\d\d:\d\d:00Z \.\. \d{4}-\d\d-\d\dT\d\d:\d\d:00Z$`)
	wantMatch(t, lines[1], `^\s*START\s+COUNT$`)
	rows := lines[2 : len(lines)-2]
	var sum int64
	for _, l := range rows {
		wantMatch(t, l, `^\s*\d{4}-\d\d-\d\dT\d\d:\d\d:00Z\s+\d+$`)
		n, _ := json.Number(strings.Fields(l)[1]).Int64()
		sum += n
	}
	if sum != 450 || !strings.Contains(lines[0], fmt.Sprintf("  %d minute buckets", len(rows))) {
		t.Fatalf("%d rows summing to %d:\n%s", len(rows), sum, out)
	}
	wantMatch(t, lines[len(lines)-2], `^\s*total\s+450$`)
	spark := lines[len(lines)-1]
	wantMatch(t, spark, `^[▁-█]+$`)
	if n := utf8.RuneCountInString(spark); n != len(rows) || !strings.HasSuffix(spark, "█") {
		t.Fatalf("sparkline %q for %d buckets", spark, len(rows))
	}

	var s struct {
		ID          string `json:"id"`
		Granularity string `json:"granularity"`
		Source      string `json:"source"`
		From        string `json:"from"`
		To          string `json:"to"`
		Total       int64  `json:"total"`
		Buckets     []struct {
			Start string `json:"start"`
			Count int64  `json:"count"`
		} `json:"buckets"`
	}
	out = ok(t, addr, "--json", "series", "page_views:article_123", "--granularity", "minute", "--from", "-10m")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("series --json: %q %v", out, err)
	}
	if s.ID != "page_views:article_123" || s.Granularity != "minute" || s.Source != "minute" || s.Total != 450 ||
		len(s.Buckets) < 10 || s.Buckets[0].Start != s.From {
		t.Fatalf("series --json: %s", out)
	}

	// The server's default: the last 60 hours; Unix seconds and RFC 3339.
	out = ok(t, addr, "series", "page_views:article_123")
	wantMatch(t, out, `^page_views:article_123  60 hour buckets  `)
	wantMatch(t, out, `(?m)^\s*total\s+450\n[▁-█]{60}\n$`)
	from := fmt.Sprint(time.Now().Add(-2 * time.Hour).Unix())
	to := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	wantMatch(t, ok(t, addr, "series", "page_views:article_123", "--from", from, "--to", to),
		`^page_views:article_123  [34] hour buckets  (.|\n)*\s+total\s+450\n`)

	// Without the table, and a sparkline narrower than the buckets.
	out = ok(t, addr, "series", "page_views:article_123", "--granularity", "minute", "--from", "-1d", "--to", "now", "--no-table", "--width", "20")
	wantMatch(t, out, `^page_views:article_123  144[01] minute buckets  \S+ \.\. \S+  \(sparkline: 7[23] buckets a mark\)\n\s*total\s+450\n[▁-█]{20}\n$`)

	// Buckets summed from a finer granularity.
	ok(t, addr, "rollup", "set", "coarse", "--minute", "0", "--hour", "0", "--month", "0")
	ok(t, addr, "incr", "coarse:x", "7")
	out = ok(t, addr, "series", "coarse:x", "--granularity", "month", "--no-table")
	wantMatch(t, out, `^coarse:x  60 month buckets  \S+ \.\. \S+  \(summed from day buckets\)\n\s*total\s+7\n`)

	code, _, errOut = ctl(t, addr, "series", "coarse:x", "--granularity", "hour")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: invalid_argument: ") {
		t.Fatalf("series of a granularity not kept: exit %d, stderr %q", code, errOut)
	}
	ok(t, addr, "hincr", "page_views:h", "f")
	code, _, errOut = ctl(t, addr, "series", "page_views:h")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: wrong_kind: ") {
		t.Fatalf("series of a hash: exit %d, stderr %q", code, errOut)
	}
}

func TestUniquesCommand(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "rollup", "set", "visitors", "--unique-days", "30d")
	ok(t, addr, "pfadd", "visitors:article_123", "alice", "bob", "carol")
	ok(t, addr, "pfadd", "visitors:article_123", "bob", "dave")
	wantMatch(t, ok(t, addr, "uniques", "visitors:article_123", "--last", "7d"), `^4 ± 0\.81% \(4\.\.4\), [12] sketch(es)?\n$`)
	wantMatch(t, ok(t, addr, "uniques", "visitors:article_123"), `^4 ± 0\.81% \(4\.\.4\), 1 sketch\n$`)
	wantMatch(t, ok(t, addr, "uniques", "visitors:article_123", "--last", "24h"), `^4 ± 0\.81% \(4\.\.4\), [12] sketch(es)?\n$`)

	out := ok(t, addr, "uniques", "visitors:article_123", "--last", "7d", "--json")
	var u struct {
		ID        string  `json:"id"`
		Last      string  `json:"last"`
		From      string  `json:"from"`
		To        string  `json:"to"`
		Value     uint64  `json:"value"`
		StdError  float64 `json:"std_error"`
		Low       uint64  `json:"low"`
		High      uint64  `json:"high"`
		Precision int     `json:"precision"`
		Sketches  int     `json:"sketches"`
	}
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("uniques --json: %q %v", out, err)
	}
	if u.ID != "visitors:article_123" || u.Last != "7d" || u.Value != 4 || u.Low != 4 || u.High != 4 ||
		u.Precision != 14 || u.StdError != 0.008125 || u.Sketches < 1 || u.From == "" || u.To == "" {
		t.Fatalf("uniques --json: %s", out)
	}

	// Many items: the interval widens.
	items := make([]string, 2000)
	for i := range items {
		items[i] = fmt.Sprintf("user_%d", i)
	}
	ok(t, addr, append([]string{"pfadd", "visitors:big"}, items...)...)
	out = ok(t, addr, "uniques", "visitors:big", "--last", "30d")
	wantMatch(t, out, `^\d+ ± 0\.81% \(\d+\.\.\d+\), [12] sketch(es)?\n$`)
	var est, lo, hi int
	fmt.Sscanf(out, "%d ± 0.81%% (%d..%d)", &est, &lo, &hi)
	if est < 1900 || est > 2100 || lo >= est || hi <= est {
		t.Fatalf("uniques of 2000 items: %q", out)
	}

	ok(t, addr, "incr", "visitors:count")
	ok(t, addr, "pfadd", "other", "x")
	for _, tc := range []struct{ args, stderr string }{
		{"uniques visitors:article_123 --last 31d", "counterctl: invalid_argument: "},
		{"uniques visitors:count", "counterctl: wrong_kind: "},
		{"uniques other", "counterctl: not_found: "},
	} {
		code, _, errOut := ctl(t, addr, strings.Fields(tc.args)...)
		if code != 1 || !strings.HasPrefix(errOut, tc.stderr) {
			t.Fatalf("counterctl %s: exit %d, stderr %q", tc.args, code, errOut)
		}
	}
}

func TestRollupCommand(t *testing.T) {
	addr := startServer(t)
	code, _, errOut := ctl(t, addr, "rollup", "get", "page_views")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: not_found: ") {
		t.Fatalf("rollup get of a missing spec: exit %d, stderr %q", code, errOut)
	}
	wantOut(t, ok(t, addr, "rollup", "list"), "")

	const pageViews = "page_views\n" +
		"  minute        2d\n" +
		"  hour          30d\n" +
		"  day           400d\n" +
		"  month         0 (not kept)\n" +
		"  unique_hours  2d\n" +
		"  unique_days   400d\n" +
		"  precision     12 (std error 1.62%)\n"
	wantOut(t, ok(t, addr, "rollup", "set", "page_views", "--minute", "48h", "--hour", "30d", "--month", "0", "--precision", "12"), pageViews)
	wantOut(t, ok(t, addr, "rollup", "get", "page_views"), pageViews)
	wantMatch(t, ok(t, addr, "rollup", "set", "likes:article_1"), `^likes:article_1\n  minute        2d\n  hour          90d\n(.|\n)*  precision     14 \(std error 0\.81%\)\n$`)

	var spec struct {
		Key    string `json:"key"`
		Rollup struct {
			Minute      string  `json:"minute"`
			Hour        string  `json:"hour"`
			Day         string  `json:"day"`
			Month       string  `json:"month"`
			UniqueHours string  `json:"unique_hours"`
			UniqueDays  string  `json:"unique_days"`
			Precision   int     `json:"precision"`
			StdError    float64 `json:"std_error"`
		} `json:"rollup"`
	}
	out := ok(t, addr, "--json", "rollup", "get", "page_views")
	if err := json.Unmarshal([]byte(out), &spec); err != nil {
		t.Fatalf("rollup get --json: %q %v", out, err)
	}
	if r := spec.Rollup; spec.Key != "page_views" || r.Minute != "2d" || r.Hour != "30d" || r.Day != "400d" || r.Month != "0" ||
		r.UniqueHours != "2d" || r.UniqueDays != "400d" || r.Precision != 12 || r.StdError != 0.01625 {
		t.Fatalf("rollup get --json: %s", out)
	}
	out = ok(t, addr, "rollup", "set", "visitors", "--unique-hours", "168h", "--unique-days", "90d", "--day", "0", "--json")
	if err := json.Unmarshal([]byte(out), &spec); err != nil || spec.Key != "visitors" || spec.Rollup.UniqueHours != "7d" ||
		spec.Rollup.UniqueDays != "90d" || spec.Rollup.Day != "0" || spec.Rollup.Precision != 14 {
		t.Fatalf("rollup set --json: %q %v", out, err)
	}

	wantOut(t, ok(t, addr, "rollup", "list"),
		"KEY              MINUTE  HOUR  DAY   MONTH  UNIQUE_HOURS  UNIQUE_DAYS  PRECISION\n"+
			"likes:article_1  2d      90d   400d  3660d  2d            400d         14\n"+
			"page_views       2d      30d   400d  0      2d            400d         12\n"+
			"visitors         2d      90d   0     3660d  7d            90d          14\n")
	var list struct {
		Rollups map[string]struct {
			Minute    string `json:"minute"`
			Precision int    `json:"precision"`
		} `json:"rollups"`
	}
	out = ok(t, addr, "rollup", "list", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Rollups) != 3 || list.Rollups["page_views"].Precision != 12 {
		t.Fatalf("rollup list --json: %q %v", out, err)
	}

	wantOut(t, ok(t, addr, "rollup", "del", "page_views"), "deleted\n")
	wantOut(t, ok(t, addr, "rollup", "del", "page_views"), "not found\n")
	var del struct {
		Key     string `json:"key"`
		Deleted *bool  `json:"deleted"`
	}
	out = ok(t, addr, "--json", "rollup", "del", "likes:article_1")
	if err := json.Unmarshal([]byte(out), &del); err != nil || del.Key != "likes:article_1" || del.Deleted == nil || !*del.Deleted {
		t.Fatalf("rollup del --json: %q %v", out, err)
	}
	wantMatch(t, ok(t, addr, "rollup", "list"), `^KEY .*\nvisitors .*\n$`)

	code, _, errOut = ctl(t, addr, "rollup", "set", "bad\x01key")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: invalid_id: ") {
		t.Fatalf("rollup set of a bad key: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = ctl(t, addr, "rollup", "set", "x", "--hour", "30s")
	if code != 1 || !strings.HasPrefix(errOut, "counterctl: invalid_argument: ") {
		t.Fatalf("rollup set of a retention shorter than a bucket: exit %d, stderr %q", code, errOut)
	}
}

// TestVersionFlag: --version prints the binary's version and needs no
// server.
func TestVersionFlag(t *testing.T) {
	code, out, errOut := ctl(t, "http://127.0.0.1:1", "--version")
	if code != 0 || !strings.HasPrefix(out, "counterctl ") || len(strings.TrimSpace(out)) <= len("counterctl") || errOut != "" {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
