package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
)

// TestClusterForget: a 3-node cluster loses two nodes for good (SIGKILL).
// The survivor refuses owner writes (it sees no majority) until both are
// forgotten (one with counterctl, one over HTTP); then it serves every id
// with its acknowledged value and takes writes; the forgotten n2 coming
// back on its stale data is refused by the cluster and serves nothing; two
// fresh nodes join and, with the survivor killed in turn, serve all data.
func TestClusterForget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of counterd processes")
	}
	ctl := counterctlBin(t)
	c := newCluster(t, 3, loopback)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	v, err := n1.view()
	if err != nil {
		t.Fatal(err)
	}
	r := ringOf(v)

	// Counters owned by each node (written through n1, sync: acknowledged
	// on a quorum; those owned elsewhere are on n1 once replication settles),
	// and pn counters owned by n1 with adds on every node (the slots of n2
	// and n3 must survive on n1).
	want := map[string]int64{}
	var owned = map[string][]string{}
	var pns []string
	for i := 0; len(owned["n1"]) < 8 || len(owned["n2"]) < 8 || len(owned["n3"]) < 8 || len(pns) < 4; i++ {
		id := fmt.Sprintf("fg:c:%d", i)
		if o := r.Owner(id); len(owned[o]) < 8 {
			owned[o] = append(owned[o], id)
		}
		if pid := fmt.Sprintf("fg:pn:%d", i); r.Owner(pid) == "n1" && len(pns) < 4 {
			pns = append(pns, pid)
		}
	}
	ctx := context.Background()
	write := func(nd *cnode, id string, d int64, kind cdclient.Kind) {
		t.Helper()
		if _, err := nd.c.Incr(ctx, id, d, cdclient.WithKind(kind), cdclient.WithDurability("sync")); err != nil {
			t.Fatalf("incr %s via %s: %v", id, nd.id, err)
		}
		want[id] += d
	}
	for _, o := range []string{"n2", "n3", "n1"} { // n1's own last
		for i, id := range owned[o] {
			write(n1, id, int64(10+i), cdclient.KindCounter)
			write(n1, id, 1, cdclient.KindCounter)
		}
	}
	for i, id := range pns {
		for j, nd := range c.nodes {
			write(nd, id, int64(100*(j+1)+i), cdclient.KindPN)
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if err := poll(15*time.Second, func() error { return readsAll([]*cnode{n1}, want, ids) }); err != nil {
		t.Fatalf("n1 does not read the writes: %v", err)
	}
	// Replication barrier: nothing pending on any node.
	if err := poll(15*time.Second, func() error {
		for _, nd := range c.nodes {
			if lag, err := replicationLag(nd); err != nil || lag != 0 {
				return fmt.Errorf("%s: replication lag %v %v", nd.id, lag, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	n2.kill(t)
	n3.kill(t)
	if err := poll(30*time.Second, func() error {
		v, err := n1.view()
		if err != nil {
			return err
		}
		if s := states(v); s["n2"] != "dead" || s["n3"] != "dead" {
			return fmt.Errorf("n1 sees %v", s)
		}
		return nil
	}); err != nil {
		t.Fatalf("n1 did not declare n2 and n3 dead: %v", err)
	}
	refused := func(what string) {
		t.Helper()
		_, err := n1.raw.Incr(ctx, owned["n1"][0], 1, cdclient.WithKind(cdclient.KindCounter))
		var ce *cdclient.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "half") {
			t.Fatalf("%s: owner write on n1 answered %v, want 503 (no majority)", what, err)
		}
	}
	refused("n2 and n3 dead")

	// Bad forgets change nothing.
	for _, tc := range []struct{ node, msg string }{{"n1", "itself"}, {"n9", "no such"}} {
		code, out, errOut := runCounterctl(ctl, "--addr", n1.url, "cluster", "forget", tc.node)
		if code != 1 || !strings.Contains(errOut, tc.msg) {
			t.Errorf("forget %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.node, code, out, errOut, tc.msg)
		}
	}
	code, out, errOut := runCounterctl(ctl, "--addr", n1.url, "cluster", "forget", "n2")
	if code != 0 || !strings.HasPrefix(out, "forgot n2\n") || !strings.Contains(out, "forgotten: n2") {
		t.Fatalf("counterctl cluster forget n2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	refused("n2 forgotten, n3 dead") // one of two: still no majority

	resp, err := http.Post(n1.url+"/cluster/forget", "application/json", strings.NewReader(`{"node":"n3"}`))
	if err != nil {
		t.Fatal(err)
	}
	var st clusterView
	var forgotten struct {
		Forgotten []string `json:"forgotten"`
	}
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil || json.Unmarshal(body, &forgotten) != nil ||
		!slices.Equal(st.alive(), []string{"n1"}) || len(st.Members) != 1 || !slices.Equal(forgotten.Forgotten, []string{"n2", "n3"}) {
		t.Fatalf("POST /cluster/forget n3: %d %s", resp.StatusCode, body)
	}

	// Kept on disk for restarts.
	if b, err := os.ReadFile(filepath.Join(n1.dir, "cluster-forgotten.json")); err != nil || strings.TrimSpace(string(b)) != `["n2","n3"]` {
		t.Fatalf("n1's forget file: %q %v", b, err)
	}

	// The survivor serves every id with its acknowledged value, and writes.
	if err := readsAll([]*cnode{n1}, want, ids); err != nil {
		t.Fatalf("after forget, n1: %v", err)
	}
	for _, o := range []string{"n1", "n2", "n3"} {
		write(n1, owned[o][0], 1000, cdclient.KindCounter)
	}

	// n2 comes back on its stale data: refused, and it serves nothing.
	n2.start(t)
	if err := poll(30*time.Second, func() error {
		_, err := n2.raw.Get(ctx, owned["n2"][0])
		var ce *cdclient.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "forgotten") {
			return fmt.Errorf("read on the forgotten n2: %v", err)
		}
		if resp, err := pollc.Get(n2.url + "/readyz"); err != nil || resp.Body.Close() != nil || resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("forgotten n2 /readyz: %v %v", resp, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("the forgotten n2 still serves: %v", err)
	}

	// Two fresh nodes join: back to three, all data everywhere.
	n4, n5 := c.add(t), c.add(t)
	fresh := []*cnode{n1, n4, n5}
	views := waitAlive(t, fresh, 60*time.Second)
	for _, v := range views {
		if len(v.Members) != 3 {
			t.Fatalf("%s lists %+v; the forgotten nodes must not come back", v.Self, v.Members)
		}
	}
	code, _, errOut = runCounterctl(ctl, "--addr", n1.url, "cluster", "forget", "n4")
	if code != 1 || !strings.Contains(errOut, "alive") {
		t.Fatalf("forget of the live n4: exit %d, stderr %q; want refused", code, errOut)
	}
	if err := poll(30*time.Second, func() error { return readsAll(fresh, want, ids) }); err != nil {
		t.Fatalf("after n4 and n5 joined: %v", err)
	}
	// The new nodes hold the data themselves: without n1 they still serve
	// it (reads fall back to a replica until n1 is declared dead).
	n1.kill(t)
	if err := poll(30*time.Second, func() error { return readsAll([]*cnode{n4, n5}, want, ids) }); err != nil {
		t.Fatalf("n4 and n5 without n1: %v", err)
	}
	waitAlive(t, []*cnode{n4, n5}, 30*time.Second)
	write(n4, owned["n2"][1], 7, cdclient.KindCounter)
	if err := readsAll([]*cnode{n4, n5}, want, ids); err != nil {
		t.Fatalf("n4 and n5 after n1 died: %v", err)
	}
}

// readsAll checks that every node reads want[id] for every id.
func readsAll(nodes []*cnode, want map[string]int64, ids []string) error {
	var errs []error
	for _, nd := range nodes {
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			got, err := nd.raw.Get(ctx, id)
			cancel()
			if err != nil || got.Value != want[id] {
				errs = append(errs, fmt.Errorf("%s on %s: %d %v, want %d", id, nd.id, got.Value, err, want[id]))
			}
		}
	}
	return errors.Join(errs...)
}

// states maps member ids to their state in v.
func states(v clusterView) map[string]string {
	m := map[string]string{}
	for _, mem := range v.Members {
		m[mem.ID] = mem.State
	}
	return m
}

// replicationLag reads counterd_cluster_replication_lag_seconds.
func replicationLag(nd *cnode) (float64, error) {
	resp, err := pollc.Get(nd.url + "/cluster/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "counterd_cluster_replication_lag_seconds "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no replication lag metric (%v)", sc.Err())
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// runCounterctl runs counterctl and returns its exit code and output.
func runCounterctl(bin string, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
		e.WriteString(err.Error())
	}
	return code, o.String(), e.String()
}
