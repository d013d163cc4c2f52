package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/cluster/ring"
)

// httpDo sends method url with a JSON body and returns the status and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkPolicy runs n checks of key under the named policy, sent round-robin
// to nodes' HTTP base URLs, and returns how many were allowed.
func checkPolicy(t *testing.T, urls []string, key, policy string, n int) int {
	t.Helper()
	body := fmt.Sprintf(`{"key": %q, "policy": %q}`, key, policy)
	allowed := 0
	for i := range n {
		code, m, _, err := post(urls[i%len(urls)]+"/ratelimit/check", "", body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case code == 200 && m["allowed"] == true:
			allowed++
		case code != 429:
			t.Fatalf("check %d of %s on %s: %d %v", i, key, urls[i%len(urls)], code, m)
		}
	}
	return allowed
}

// TestRateLimitPoliciesSurviveRestart: policies changed through the API of
// an embedded node are on its disk: after a restart with the same policies
// file, the API's changes win over the file and a deletion stays deleted.
func TestRateLimitPoliciesSurviveRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(file, []byte(`policies:
  - {name: per-user, match: "user:*", algorithm: fixed_window, limit: 2, period: 1h}
  - {name: gone, match: "gone:*", algorithm: fixed_window, limit: 2, period: 1h}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	p := start(t, data, "--ratelimit-policies", file)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/ratelimit/policies/per-user", `{"match": "user:*", "algorithm": "fixed_window", "limit": 3, "period": "1h"}`},
		{"PUT", "/ratelimit/policies/api", `{"match": "api:*", "algorithm": "token_bucket", "limit": 4, "period": "1h"}`},
		{"DELETE", "/ratelimit/policies/gone", ""},
	} {
		if code, body := httpDo(t, c.method, p.addr+c.path, c.body); code != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
	p.term(t)

	p = start(t, data, "--ratelimit-policies", file)
	if got := checkPolicy(t, []string{p.addr}, "user:1", "per-user", 6); got != 3 {
		t.Errorf("per-user after restart admitted %d, want 3 (the API's limit, not the file's 2)", got)
	}
	if got := checkPolicy(t, []string{p.addr}, "api:1", "api", 6); got != 4 {
		t.Errorf("api after restart admitted %d, want 4", got)
	}
	if code, body := httpDo(t, "GET", p.addr+"/ratelimit/policies/gone", ""); code != 404 {
		t.Errorf("deleted policy after restart: %d %s, want 404", code, body)
	}
}

// clusterWithKeyOn starts a 3-node cluster and returns it, its ring and the
// first id prefix:N that owner owns.
func clusterWithKeyOn(t *testing.T, owner, prefix string) (*testCluster, *ring.Ring, string) {
	t.Helper()
	c := newCluster(t, 3, loopback)
	r := ringOf(waitAlive(t, c.nodes, 30*time.Second)[0])
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s:%d", prefix, i); r.Owner(k) == owner {
			return c, r, k
		}
	}
}

// TestClusterRateLimitOwnerLeaves: a policy put on one node is used by the
// others; a key's owner decides 6 of its limit of 10, then leaves
// (SIGTERM: drain with handoff), and the remaining nodes admit exactly 4
// more, checks spread over both.
func TestClusterRateLimitOwnerLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	c, _, key := clusterWithKeyOn(t, "n1", "rl:leave")
	owner, rest := c.node("n1"), []*cnode{c.node("n2"), c.node("n3")}
	if code, body := httpDo(t, "PUT", rest[0].url+"/ratelimit/policies/leave", `{"match": "rl:*", "algorithm": "sliding_window", "limit": 10, "period": "1h"}`); code != 200 {
		t.Fatalf("PUT policy on %s: %d %s", rest[0].id, code, body)
	}
	if err := poll(10*time.Second, func() error {
		for _, n := range c.nodes {
			if code, body := httpDo(t, "GET", n.url+"/ratelimit/policies/leave", ""); code != 200 {
				return fmt.Errorf("%s: %d %s", n.id, code, body)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the policy did not reach every node: %v", err)
	}
	urls := []string{rest[0].url, rest[1].url, owner.url}
	if got := checkPolicy(t, urls, key, "leave", 6); got != 6 {
		t.Fatalf("%d of 6 admitted before the leave", got)
	}
	owner.term(t)
	waitAlive(t, rest, 30*time.Second)
	if got := checkPolicy(t, urls[:2], key, "leave", 10); got != 4 {
		t.Errorf("after the owner left %d admitted, want 4 (limit 10, 6 before)", got)
	}
}

// TestClusterRateLimitOwnerCrash: a key's owner admits 6 of 10 and is
// killed (SIGKILL) once its state is on the key's next replica; after the
// others have seen it die, that replica owns the key and exactly 4 more
// pass.
func TestClusterRateLimitOwnerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	c, r, key := clusterWithKeyOn(t, "n1", "rl:crash")
	replica := c.node(r.Replicas(key, 2)[1])
	var rest []*cnode
	for _, n := range c.nodes {
		if n.id != "n1" {
			rest = append(rest, n)
		}
	}
	check := func(url string, cost int, forwarded bool) map[string]any {
		body := fmt.Sprintf(`{"key": %q, "cost": %d, "limits": [{"algorithm": "token_bucket", "limit": 10, "period": "1h"}]}`, key, cost)
		req, _ := http.NewRequest("POST", url+"/ratelimit/check", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		if forwarded { // decided by that node's own state (a peer's forward)
			req.Header.Set("Counterd-Forwarded", "1")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := range 6 {
		if m := check(c.nodes[i%3].url, 1, false); m["allowed"] != true {
			t.Fatalf("check %d before the crash: %v", i, m)
		}
	}
	if err := poll(10*time.Second, func() error {
		if m := check(replica.url, 0, true); m["remaining"] != 4.0 {
			return fmt.Errorf("replica %s: %v", replica.id, m["remaining"])
		}
		return nil
	}); err != nil {
		t.Fatalf("state not replicated: %v", err)
	}
	c.node("n1").kill(t)
	waitAlive(t, rest, 60*time.Second)
	allowed := 0
	for i := range 10 {
		if check(rest[i%2].url, 1, false)["allowed"] == true {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("after the owner crashed %d admitted, want 4 (limit 10, 6 before)", allowed)
	}
}
