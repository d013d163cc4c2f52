package resp_test

import (
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/quota"
)

// TestQuotaOOM: a write over a quota answers -OOM naming the quota and
// its limit, as Redis answers a write over maxmemory; inside MULTI the
// transaction applies nothing.
func TestQuotaOOM(t *testing.T) {
	ts := start(t, resp.Options{})
	q, err := quota.Parse(strings.NewReader("namespaces:\n  \"q:*\": {max_keys: 1, max_hash_fields: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ts.eng.SetQuotas(q)
	c := dialRaw(t, ts.addr)
	for _, step := range []struct{ cmd, want string }{
		{cmd("INCR", "q:a"), ":1"},
		{cmd("INCR", "q:b"), "-OOM quota exceeded for q:* (max_keys 1)"},
		{cmd("SET", "q:b", "5"), "-OOM quota exceeded for q:* (max_keys 1)"},
		{cmd("PFADD", "q:b", "x"), "-OOM quota exceeded for q:* (max_keys 1)"},
		{cmd("EXISTS", "q:b"), ":0"},
		{cmd("INCR", "q:a"), ":2"},
		{cmd("DEL", "q:a"), ":1"},
		{cmd("HSET", "q:h", "f", "1", "g", "2"), ":2"},
		{cmd("HINCRBY", "q:h", "k", "1"), "-OOM quota exceeded for q:* (max_hash_fields 2)"},
		{cmd("HINCRBY", "q:h", "f", "1"), ":2"},
		{cmd("MULTI"), "+OK"},
		{cmd("INCR", "q:h2"), "+QUEUED"},
		{cmd("INCR", "q:h3"), "+QUEUED"},
	} {
		c.send(step.cmd)
		if got := strings.TrimSuffix(c.reply(), "\r\n"); got != step.want {
			t.Fatalf("%q: got %q, want %q", step.cmd, got, step.want)
		}
	}
	c.send(cmd("EXEC"))
	if got := c.reply(); !strings.Contains(got, "OOM quota exceeded for q:* (max_keys 1)") {
		t.Fatalf("EXEC over the quota: %q", got)
	}
	c.send(cmd("EXISTS", "q:h2"))
	if got := c.reply(); got != ":0\r\n" {
		t.Fatalf("EXEC over the quota created q:h2: %q", got)
	}
}
