package ratelimit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit/ratelimittest"
)

const examplePolicies = ratelimittest.ExamplePolicies

func TestLoadPolicies(t *testing.T) {
	ps, err := LoadPolicies(strings.NewReader(examplePolicies))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 {
		t.Fatalf("%d policies", len(ps))
	}
	want := Policy{Name: "api-per-second", Match: "api:*", Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20, Cost: 1}
	if ps[1] != want {
		t.Errorf("policy 1 = %+v, want %+v", ps[1], want)
	}
	if ps[3].Cost != 10 || ps[3].Namespace != "upload" || ps[3].Algorithm != SlidingWindow {
		t.Errorf("policy 3 = %+v", ps[3])
	}
	for _, c := range []struct{ name, yaml string }{
		{"unknown field", "policies:\n  - name: a\n    match: '*'\n    limit: 1\n    period: 1s\n    colour: red\n"},
		{"bad period", "policies:\n  - name: a\n    match: '*'\n    limit: 1\n    period: soon\n"},
		{"no period", "policies:\n  - name: a\n    match: '*'\n    limit: 1\n"},
		{"no match", "policies:\n  - name: a\n    limit: 1\n    period: 1s\n"},
		{"bad algorithm", "policies:\n  - name: a\n    match: '*'\n    algorithm: magic\n    limit: 1\n    period: 1s\n"},
		{"duplicate", "policies:\n  - {name: a, match: '*', limit: 1, period: 1s}\n  - {name: a, match: '*', limit: 1, period: 1s}\n"},
		{"bad name", "policies:\n  - {name: 'a b', match: '*', limit: 1, period: 1s}\n"},
		{"cost above limit", "policies:\n  - {name: a, match: '*', limit: 1, period: 1s, cost: 2}\n"},
		{"burst on window", "policies:\n  - {name: a, match: '*', limit: 1, period: 1s, burst: 2}\n"},
		{"namespace with colon", "policies:\n  - {name: a, namespace: 'a:b', limit: 1, period: 1s}\n"},
		{"not yaml", "policies: [\n"},
		{"not a list", "policies: 3\n"},
	} {
		if _, err := LoadPolicies(strings.NewReader(c.yaml)); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("%s: err %v, want ErrInvalidPolicy", c.name, err)
		}
	}
	if ps, err := LoadPolicies(strings.NewReader("")); err != nil || len(ps) != 0 {
		t.Errorf("empty: %v %v", ps, err)
	}
}

func TestPolicyMatching(t *testing.T) {
	ps, err := LoadPolicies(strings.NewReader(examplePolicies))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, newFakeClock().Now, ps...)
	names := func(key string) []string {
		hits, err := l.AppendPolicyHits(nil, key, nil, PolicyCost)
		if err != nil {
			return []string{err.Error()}
		}
		var ns []string
		for _, h := range hits {
			ns = append(ns, h.Limit.Name)
		}
		return ns
	}
	for key, want := range map[string]string{
		"api:acme:users":  "vip-acme",
		"api:globex:x":    "api-per-second api-per-day",
		"upload:file1":    "uploads",
		"uploadx:file1":   ErrNoPolicy.Error() + `: key "uploadx:file1"`,
		"other":           ErrNoPolicy.Error() + `: key "other"`,
		"api:acme":        "api-per-second api-per-day",
		"api:acme:":       "vip-acme",
		"api:acme:a:b:c:": "vip-acme",
	} {
		if got := strings.Join(names(key), " "); got != want {
			t.Errorf("%q: %q, want %q", key, got, want)
		}
	}
	// Policy costs, an explicit cost, and named policies that need not match.
	hits, err := l.AppendPolicyHits(nil, "upload:f", nil, PolicyCost)
	if err != nil || hits[0].Cost != 10 {
		t.Errorf("policy cost: %+v %v", hits, err)
	}
	hits, err = l.AppendPolicyHits(nil, "upload:f", nil, 3)
	if err != nil || hits[0].Cost != 3 {
		t.Errorf("explicit cost: %+v %v", hits, err)
	}
	hits, err = l.AppendPolicyHits(nil, "other", []string{"api-per-day"}, PolicyCost)
	if err != nil || len(hits) != 1 || hits[0].Limit.Name != "api-per-day" {
		t.Errorf("named: %+v %v", hits, err)
	}
	if _, err := l.AppendPolicyHits(nil, "other", []string{"nope"}, 1); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown name: %v", err)
	}
	// Checks through policies are atomic across them.
	for range 10 {
		if s, err := l.CheckPolicies("api:globex:x", nil, 2, nil); err != nil || !s.Allowed {
			t.Fatalf("check: %+v %v", s, err)
		}
	}
	if s, _ := l.CheckPolicies("api:globex:x", nil, 1, nil); s.Allowed {
		t.Error("burst of 20 exceeded")
	}
	day, _ := l.Check("api:globex:x", Limit{Name: "api-per-day", Algorithm: FixedWindow, Limit: 10000, Period: 24 * time.Hour}, 0)
	if day.Remaining != 10000-20 {
		t.Errorf("per-day remaining %d, want %d", day.Remaining, 10000-20)
	}
}

func TestSetPolicies(t *testing.T) {
	l := newLimiter(t, newFakeClock().Now)
	p := Policy{Name: "a", Match: "x:*", Algorithm: FixedWindow, Limit: 1, Period: time.Second}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if s, err := l.CheckPolicies("x:1", nil, PolicyCost, nil); err != nil || !s.Allowed {
		t.Fatal(s, err)
	}
	if s, _ := l.CheckPolicies("x:1", nil, PolicyCost, nil); s.Allowed {
		t.Fatal("limit 1 allowed twice")
	}
	// Changing the numbers starts fresh state (the limit is the identity).
	p.Limit = 2
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if s, _ := l.CheckPolicies("x:1", nil, PolicyCost, nil); !s.Allowed || s.Remaining != 1 {
		t.Fatalf("after the change: %+v", s)
	}
	if err := l.SetPolicy(Policy{Name: "b"}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("invalid policy: %v", err)
	}
	if got := l.Policies(); len(got) != 1 || got[0].Limit != 2 || got[0].Cost != 1 {
		t.Errorf("Policies = %+v", got)
	}
	if !l.DeletePolicy("a") || l.DeletePolicy("a") {
		t.Error("DeletePolicy")
	}
	if _, err := l.CheckPolicies("x:1", nil, PolicyCost, nil); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("after delete: %v", err)
	}
	if err := l.SetPolicies([]Policy{p, p}); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("duplicates: %v", err)
	}
}

func TestPolicyJSON(t *testing.T) {
	p := Policy{Name: "a", Namespace: "ns", Algorithm: LeakyBucket, Limit: 5, Period: 90 * time.Second, Burst: 3, Cost: 1, Final: true}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"a","namespace":"ns","algorithm":"leaky_bucket","limit":5,"period":"90s","burst":3,"cost":1,"final":true}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err != nil || q != p {
		t.Errorf("round trip: %+v %v", q, err)
	}
	if err := json.Unmarshal([]byte(`{"name":"a","match":"*","limit":1,"period":"1s","x":1}`), &q); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("unknown field: %v", err)
	}
}
