package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// TestEventTimeIncrements: "ts" in the body of increment, decrement,
// pfadd and batch ops counts in that time's buckets; a ts too far ahead,
// too old for a window or outside 1900..2200 is 400 invalid_argument.
func TestEventTimeIncrements(t *testing.T) {
	s := newTestServer(t, Options{EventMaxSkew: 2 * time.Minute})
	for _, ns := range []string{"pv", "uv"} {
		if err := s.eng.SetRollup(ns, rollup.DefaultSpec()); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	yest := now.Truncate(24 * time.Hour).Add(-24*time.Hour + 9*time.Hour + 15*time.Minute)
	s.ok("POST", "/counters/pv:a/increment", fmt.Sprintf(`{"delta":4,"ts":%q}`, yest.Format(time.RFC3339)))
	s.ok("POST", "/counters/pv:a/decrement", fmt.Sprintf(`{"delta":1,"ts":%d}`, yest.Add(time.Hour).UnixMilli()))
	s.ok("POST", "/batch", fmt.Sprintf(`{"ops":[{"op":"increment","id":"pv:a","delta":10,"ts":%q},{"op":"pfadd","id":"uv:a","items":["a","b"],"ts":%q}]}`,
		yest.Format(time.RFC3339Nano), yest.Format(time.RFC3339)))
	s.ok("POST", "/counters/uv:a/pfadd", fmt.Sprintf(`{"items":["c"],"ts":%d}`, yest.UnixMilli()))
	s.ok("POST", "/counters/pv:a/increment", `{}`) // now
	h, err := s.eng.Series("pv:a", rollup.Hour, yest.Truncate(time.Hour), yest.Truncate(time.Hour).Add(2*time.Hour))
	if err != nil || h.Values[0] != 14 || h.Values[1] != -1 {
		t.Fatalf("yesterday's hours: %+v %v", h, err)
	}
	if s.value("pv:a") != 14 {
		t.Fatalf("pv:a = %d", s.value("pv:a"))
	}
	if est, err := s.eng.Uniques("uv:a", rollup.Day, 2); err != nil || est.Value != 3 {
		t.Fatalf("uniques: %+v %v", est, err)
	}
	if _, err := s.eng.Apply(context.Background(), contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow,
		Window: counter.WindowSpec{Span: time.Hour, Granularity: time.Minute}, Delta: 1}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, body, msg string
	}{
		{"/counters/w/increment", fmt.Sprintf(`{"ts":%q}`, now.Add(-2*time.Hour).Format(time.RFC3339)), "too late"},
		{"/counters/pv:a/increment", fmt.Sprintf(`{"ts":%q}`, now.Add(time.Hour).Format(time.RFC3339)), "too early"},
		{"/counters/uv:a/pfadd", fmt.Sprintf(`{"items":["x"],"ts":%d}`, now.Add(5*time.Minute).UnixMilli()), "too early"},
		{"/counters/pv:a/increment", `{"ts":"9999-12-31T00:00:00Z"}`, "1900..2200"},
		{"/counters/pv:a/increment", `{"ts":"0000-01-01T00:00:00Z"}`, "1900..2200"},
		{"/counters/pv:a/increment", `{"ts":"yesterday"}`, "ts"},
		{"/counters/pv:a/increment", `{"ts":1.5}`, "ts"},
		{"/counters/pv:a/increment", `{"ts":true}`, "ts"},
		{"/counters/pv:a/increment", `{"kind":"float","delta":"1.5","ts":1764064800000}`, "float"},
		{"/batch", fmt.Sprintf(`{"ops":[{"op":"increment","id":"pv:a"},{"op":"increment","id":"pv:a","ts":%q}]}`, now.Add(time.Hour).Format(time.RFC3339)), "too early"},
	} {
		a := s.fail(http.StatusBadRequest, "invalid_argument", "POST", tc.path, tc.body)
		if !strings.Contains(string(a.Raw), tc.msg) {
			t.Errorf("%s %s: %s, want %q in the message", tc.path, tc.body, a.Raw, tc.msg)
		}
	}
	if s.value("pv:a") != 14 {
		t.Fatalf("pv:a changed by refused requests: %d", s.value("pv:a"))
	}
}
