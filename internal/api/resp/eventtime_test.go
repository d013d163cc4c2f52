package resp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// TestEventTimeCommands: COUNTERD.INCRBY ... AT and COUNTERD.PFADD ... AT
// count in the buckets of their time; times too far ahead, too old for a
// window, or outside 1900..2200 are refused with typed errors.
func TestEventTimeCommands(t *testing.T) {
	eng := openEngine(t)
	for _, ns := range []string{"pv", "uv"} {
		if err := eng.SetRollup(ns, rollup.DefaultSpec()); err != nil {
			t.Fatal(err)
		}
	}
	ts := startOn(t, eng, resp.Options{EventMaxSkew: 2 * time.Minute})
	c := dialRaw(t, ts.addr)
	do := func(args ...string) string {
		t.Helper()
		c.send(cmd(args...))
		return strings.TrimSuffix(c.reply(), "\r\n")
	}
	now := time.Now().UTC()
	yest := now.Truncate(24 * time.Hour).Add(-24*time.Hour + 10*time.Hour + 30*time.Minute)
	if r := do("COUNTERD.INCRBY", "pv:a", "5", "AT", yest.Format(time.RFC3339)); r != ":5" {
		t.Fatalf("incrby at: %q", r)
	}
	if r := do("counterd.incrby", "pv:a", "2", "at", fmt.Sprint(yest.Add(time.Hour).UnixMilli())); r != ":7" {
		t.Fatalf("incrby at ms: %q", r)
	}
	if r := do("COUNTERD.INCRBY", "pv:a", "1"); r != ":8" { // now
		t.Fatalf("incrby: %q", r)
	}
	h, err := eng.Series("pv:a", rollup.Hour, yest.Truncate(time.Hour), yest.Truncate(time.Hour).Add(2*time.Hour))
	if err != nil || h.Values[0] != 5 || h.Values[1] != 2 {
		t.Fatalf("yesterday's hours: %+v %v", h, err)
	}
	// A transaction takes it too.
	do("MULTI")
	do("COUNTERD.INCRBY", "pv:a", "3", "AT", yest.Format(time.RFC3339Nano))
	if r := do("EXEC"); r != "*1\r\n:11" {
		t.Fatalf("exec: %q", r)
	}
	if r := do("COUNTERD.PFADD", "uv:a", "AT", yest.Format(time.RFC3339), "u1", "u2", "u3"); r != ":1" {
		t.Fatalf("pfadd at: %q", r)
	}
	if est, err := eng.Uniques("uv:a", rollup.Day, 2); err != nil || est.Value != 3 {
		t.Fatalf("uniques of 2 days: %+v %v", est, err)
	}
	if est, err := eng.Uniques("uv:a", rollup.Day, 1); err != nil || est.Value != 0 {
		t.Fatalf("uniques of today: %+v %v", est, err)
	}
	// A window of an hour refuses an increment of two hours ago.
	if _, err := eng.Apply(context.Background(), contract.Op{Type: contract.OpAdd, ID: "w", Kind: contract.KindWindow,
		Window: counter.WindowSpec{Span: time.Hour, Granularity: time.Minute}, Delta: 1}, contract.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"COUNTERD.INCRBY", "w", "1", "AT", now.Add(-2 * time.Hour).Format(time.RFC3339)}, "-ERR too_late: "},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "AT", now.Add(time.Hour).Format(time.RFC3339)}, "-ERR too_early: "},
		{[]string{"COUNTERD.PFADD", "uv:a", "AT", now.Add(3 * time.Minute).Format(time.RFC3339), "x"}, "-ERR too_early: "},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "AT", "9999-12-31T00:00:00Z"}, "-ERR invalid argument: "},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "AT", "0000-01-01T00:00:00Z"}, "-ERR invalid argument: "},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "AT", "yesterday"}, "-ERR invalid argument: "},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "AT"}, "-ERR syntax error"},
		{[]string{"COUNTERD.INCRBY", "pv:a", "1", "WHEN", "1"}, "-ERR syntax error"},
		{[]string{"COUNTERD.INCRBY", "pv:a", "x"}, "-ERR value is not an integer"},
		{[]string{"COUNTERD.PFADD", "uv:a", "u1", "u2", "u3"}, "-ERR syntax error"},
	} {
		if r := do(tc.args...); !strings.HasPrefix(r, tc.want) {
			t.Errorf("%v: %q, want %s...", tc.args, r, tc.want)
		}
	}
	if v, _ := eng.Get("pv:a"); v.Value != 11 {
		t.Fatalf("pv:a changed by refused increments: %d", v.Value)
	}
}
