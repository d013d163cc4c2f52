package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestQuotasProcess: --quotas on the real binary refuses the key past
// max_keys on HTTP (429 quota_exceeded) and RESP (-OOM), keeps the count
// across a restart, and SIGHUP reloads the file (a broken file keeps the
// quotas in force).
func TestQuotasProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	qfile := filepath.Join(dir, "quotas.yaml")
	writeQuotas := func(text string) {
		if err := os.WriteFile(qfile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeQuotas("namespaces:\n  \"q:*\": {max_keys: 2}\n")
	respAddr := "127.0.0.1:" + freePort(t)
	data := filepath.Join(dir, "data")
	p := start(t, data, "--quotas", qfile, "--resp", respAddr)
	incr := func(p *proc, id string) (int, string) { return quotaIncr(t, p.addr, id) }
	usage := func(p *proc) int64 { return quotaKeys(t, p.addr) }
	for _, id := range []string{"q:a", "q:b", "q:a"} {
		if s, b := incr(p, id); s != 200 {
			t.Fatalf("%s: %d %s", id, s, b)
		}
	}
	if s, b := incr(p, "q:c"); s != 429 || !strings.Contains(b, `"code":"quota_exceeded"`) || !strings.Contains(b, `"max":2`) {
		t.Fatalf("3rd key: %d %s", s, b)
	}
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := respCmd(t, conn, bufio.NewReader(conn), "INCR", "q:c"); got != "-OOM quota exceeded for q:* (max_keys 2)" {
		t.Fatalf("RESP INCR of a 3rd key: %q", got)
	}
	if n := usage(p); n != 2 {
		t.Fatalf("usage %d, want 2", n)
	}

	// Restart: the count comes back from the stored keys.
	p.term(t)
	p = start(t, data, "--quotas", qfile)
	if n := usage(p); n != 2 {
		t.Fatalf("usage after restart %d, want 2", n)
	}
	if s, _ := incr(p, "q:c"); s != 429 {
		t.Fatalf("3rd key after restart: %d", s)
	}

	// SIGHUP with a higher limit.
	writeQuotas("namespaces:\n  \"q:*\": {max_keys: 3}\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, b := incr(p, "q:c")
		if s == 200 {
			break
		}
		if s != 429 || time.Now().After(deadline) {
			t.Fatalf("3rd key after the reload: %d %s", s, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _ := incr(p, "q:d"); s != 429 {
		t.Fatalf("4th key after the reload to 3: %d", s)
	}
	// A broken file keeps the quotas in force.
	writeQuotas("namespaces:\n  \"q:*\": {max_keys: 0}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(p.logs(), "quotas file reload failed") {
		if time.Now().After(deadline) {
			t.Fatal("no reload failure logged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _ := incr(p, "q:d"); s != 429 {
		t.Fatalf("4th key after a broken reload: %d", s)
	}
	if n := usage(p); n != 3 {
		t.Fatalf("usage %d, want 3", n)
	}
}

// TestQuotasBadFile: counterd does not start with a quotas file that does
// not parse, and says which line is wrong.
func TestQuotasBadFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	qfile := filepath.Join(dir, "quotas.yaml")
	if err := os.WriteFile(qfile, []byte("namespaces:\n  \"q:*\": {max_keyz: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(counterdBin(t), "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0", "--resp", "", "--grpc", "", "--quotas", qfile)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "line 2") || !strings.Contains(string(out), "max_keyz") {
		t.Fatalf("start with a bad quotas file: %v\n%s", err, out)
	}
}

// TestQuotasTieredProcess: two tiered counterd processes on one Redis and
// PostgreSQL (--redis --postgres --quotas) share one count: keys created
// alternately on both are refused at exactly max_keys on either (HTTP 429
// and RESP -OOM), GET /quotas agrees on both, a delete on one gives room
// to the other, and SIGHUP reloads the file.
func TestQuotasTieredProcess(t *testing.T) {
	env := newTieredEnv(t)
	qfile := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(qfile, []byte("namespaces:\n  \"q:*\": {max_keys: 4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr := "127.0.0.1:" + freePort(t)
	nodes := []*proc{env.start(t, "--quotas", qfile, "--resp", respAddr), env.start(t, "--quotas", qfile)}
	incr := func(p *proc, id string) (int, string) { return quotaIncr(t, p.addr, id) }
	usage := func(p *proc) int64 { return quotaKeys(t, p.addr) }
	for i, id := range []string{"q:a", "q:b", "q:c", "q:d"} {
		if s, b := incr(nodes[i%2], id); s != 200 {
			t.Fatalf("%s: %d %s", id, s, b)
		}
	}
	for i, p := range nodes {
		if s, b := incr(p, "q:e"); s != 429 || !strings.Contains(b, `"code":"quota_exceeded"`) || !strings.Contains(b, `"max":4`) {
			t.Fatalf("node %d, 5th key: %d %s", i, s, b)
		}
		if n := usage(p); n != 4 {
			t.Fatalf("node %d: usage %d, want 4", i, n)
		}
	}
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if got := respCmd(t, conn, r, "INCR", "q:e"); got != "-OOM quota exceeded for q:* (max_keys 4)" {
		t.Fatalf("RESP INCR of a 5th key: %q", got)
	}
	if got := respCmd(t, conn, r, "DEL", "q:a"); got != ":1" {
		t.Fatalf("DEL q:a: %q", got)
	}
	if s, b := incr(nodes[1], "q:e"); s != 200 {
		t.Fatalf("a key after a delete on the other node: %d %s", s, b)
	}
	// SIGHUP with a higher limit, on one node.
	if err := os.WriteFile(qfile, []byte("namespaces:\n  \"q:*\": {max_keys: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, b := incr(nodes[0], "q:f")
		if s == 200 {
			break
		}
		if s != 429 || time.Now().After(deadline) {
			t.Fatalf("5th key after the reload: %d %s", s, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := usage(nodes[1]); n != 5 {
		t.Fatalf("the other node counts %d keys, want 5", n)
	}
}

// TestQuotasClusterProcess: --quotas with --join: max_keys counts the
// keys of the whole cluster, whichever node a write reaches (HTTP 429
// quota_exceeded with the quota on a forwarded write too), every node's
// GET /quotas shows the cluster's count, and SIGHUP reloads the file.
func TestQuotasClusterProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	qfile := filepath.Join(t.TempDir(), "quotas.yaml")
	writeQuotas := func(text string) {
		if err := os.WriteFile(qfile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeQuotas("namespaces:\n  \"q:*\": {max_keys: 3}\n")
	c := &testCluster{place: loopback}
	var joins []string
	for i := range 3 {
		nd := c.newNode(t, i)
		nd.extra = []string{"--quotas", qfile}
		c.nodes = append(c.nodes, nd)
		joins = append(joins, nd.gossip)
	}
	for _, nd := range c.nodes {
		nd.join = strings.Join(joins, ",")
		nd.start(t)
	}
	waitAlive(t, c.nodes, 60*time.Second)
	incr := func(nd *cnode, id string) (int, string) { return quotaIncr(t, nd.url, id) }
	usage := func(nd *cnode) int64 { return quotaKeys(t, nd.url) }
	for i, id := range []string{"q:a", "q:b", "q:c", "q:a"} {
		if s, b := incr(c.nodes[i%3], id); s != 200 {
			t.Fatalf("%s: %d %s", id, s, b)
		}
	}
	for i, id := range []string{"q:d", "q:e", "q:f", "q:g"} {
		if s, b := incr(c.nodes[i%3], id); s != 429 || !strings.Contains(b, `"code":"quota_exceeded"`) || !strings.Contains(b, `"max":3`) || !strings.Contains(b, `"q:*"`) {
			t.Fatalf("%s past max_keys 3 through %s: %d %s", id, c.nodes[i%3].id, s, b)
		}
	}
	for _, nd := range c.nodes {
		if n := usage(nd); n != 3 {
			t.Fatalf("%s: usage %d, want 3", nd.id, n)
		}
	}
	writeQuotas("namespaces:\n  \"q:*\": {max_keys: 4}\n")
	for _, nd := range c.nodes {
		if err := nd.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, b := incr(c.nodes[1], "q:d")
		if s == 200 {
			break
		}
		if s != 429 || time.Now().After(deadline) {
			t.Fatalf("4th key after the reload: %d %s", s, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s, b := incr(c.nodes[2], "q:e"); s != 429 {
		t.Fatalf("5th key after the reload to 4: %d %s", s, b)
	}
	if n := usage(c.nodes[0]); n != 4 {
		t.Fatalf("usage %d after the reload, want 4", n)
	}
}

// quotaIncr increments id on the node at base over HTTP and returns the
// status and body.
func quotaIncr(t *testing.T, base, id string) (int, string) {
	t.Helper()
	resp, err := client.Post(base+"/counters/"+id+"/increment", "application/json", strings.NewReader(`{"delta":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// quotaKeys is the key count of quota q:* in GET /quotas of the node at
// base.
func quotaKeys(t *testing.T, base string) int64 {
	t.Helper()
	resp, err := client.Get(base + "/quotas")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Quotas []struct {
			Quota string
			Keys  int64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	for _, u := range a.Quotas {
		if u.Quota == "q:*" {
			return u.Keys
		}
	}
	t.Fatalf("%s/quotas: no q:* in %+v", base, a)
	return 0
}
