package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/quota"
)

// TestQuotaHTTP: a write over a quota is 429 quota_exceeded naming the
// quota and its limit, changes nothing, and GET /quotas and /metrics
// show the usage.
func TestQuotaHTTP(t *testing.T) {
	s := newTestServer(t, Options{})
	q, err := quota.Parse(strings.NewReader("namespaces:\n  \"q:*\": {max_keys: 2, max_hash_fields: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := s.ok("GET", "/quotas", "")
	if a.Body["enabled"] != false {
		t.Fatalf("GET /quotas without quotas: %s", a.Raw)
	}
	s.eng.SetQuotas(q)
	s.ok("POST", "/counters/q:a/increment", `{"delta": 1}`)
	s.ok("POST", "/counters/q:b/increment", `{"delta": 1}`)
	a = s.fail(429, "quota_exceeded", "POST", "/counters/q:c/increment", `{"delta": 1}`)
	var body struct {
		Error struct {
			Message string
			Quota   struct {
				Name, Limit string
				Max         int64
			}
		}
	}
	if err := json.Unmarshal(a.Raw, &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Message != "quota exceeded for q:* (max_keys 2)" || body.Error.Quota.Name != "q:*" || body.Error.Quota.Limit != "max_keys" || body.Error.Quota.Max != 2 {
		t.Fatalf("answer %s", a.Raw)
	}
	if v, _ := s.eng.Get("q:c"); v.Exists {
		t.Fatal("refused write created the counter")
	}
	s.fail(429, "quota_exceeded", "POST", "/batch", `{"ops": [{"op": "increment", "id": "q:a"}, {"op": "increment", "id": "q:d"}]}`)
	if v, _ := s.eng.Get("q:a"); v.Value != 1 {
		t.Fatalf("refused batch applied its first op: %d", v.Value)
	}
	s.ok("POST", "/counters/q:a/increment", `{"delta": 1}`) // existing key
	a = s.ok("GET", "/quotas", "")
	if !strings.Contains(string(a.Raw), `{"quota":"q:*","keys":2,"max_keys":2,"max_hash_fields":1}`) || a.Body["enabled"] != true {
		t.Fatalf("GET /quotas: %s", a.Raw)
	}
	m := s.ok("GET", "/metrics", "")
	for _, want := range []string{`counterd_quota_keys{namespace="",quota="q:*"} 2`, `counterd_quota_limit{limit="max_keys",namespace="",quota="q:*"} 2`} {
		if !strings.Contains(string(m.Raw), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	s.ok("DELETE", "/counters/q:b", "")
	s.ok("POST", "/counters/q:c/hincr", `{"fields": {"f": 1}}`)
	a = s.fail(429, "quota_exceeded", "POST", "/counters/q:c/hincr", `{"fields": {"g": 1}}`)
	if !strings.Contains(string(a.Raw), `"limit":"max_hash_fields"`) {
		t.Fatalf("hash answer %s", a.Raw)
	}
	if _, err := s.eng.Apply(t.Context(), contract.Op{Type: contract.OpAdd, ID: "q:z", Delta: 1}, contract.WriteOptions{}); err == nil {
		t.Fatal("engine accepted a key over the quota")
	}
}
