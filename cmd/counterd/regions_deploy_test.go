package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/pgtest"
	"github.com/counterd/counterd/internal/testutil/redistest"
)

// Regions of any deployment: each test runs two regions, a and b, each a
// cluster of three nodes (--join) or two tiered nodes (--redis and
// --postgres: a private Redis and a private PostgreSQL per region), with
// every link between the regions through a cutProxy (regions_repl_test.go).

// TestRegionsClustersCutAndHeal: two regions, each a cluster of three.
func TestRegionsClustersCutAndHeal(t *testing.T) {
	runRegionDeployments(t, "cluster", "cluster")
}

// TestRegionsTieredCutAndHeal: two regions, each two tiered nodes on its
// own Redis and PostgreSQL.
func TestRegionsTieredCutAndHeal(t *testing.T) {
	runRegionDeployments(t, "tiered", "tiered")
}

// TestRegionsTieredAndClusterCutAndHeal: a tiered region and a cluster
// region.
func TestRegionsTieredAndClusterCutAndHeal(t *testing.T) {
	runRegionDeployments(t, "tiered", "cluster")
}

// runRegionDeployments runs regions a and b of the given deployments.
// Every node of both regions takes writes: counters both regions share,
// counters each region owns, and a counter region a deletes (its part)
// and counts again. Then the regions are cut apart, both keep taking
// writes, the cut heals, and the global value of every counter read on
// every node of both regions converges to exactly the sum of the writes
// acknowledged in each region (what a region deleted no longer counted);
// its local value on every node is its region's part. Last, a node of
// each tiered region restarts on an empty data directory.
func runRegionDeployments(t *testing.T, kindA, kindB string) {
	if testing.Short() {
		t.Skip("builds and runs counterd processes")
	}
	const interval = 200 * time.Millisecond
	names := []string{"a", "b"}
	kinds := map[string]string{"a": kindA, "b": kindB}
	nodes := map[string][]*cnode{}
	var all []*cnode
	for _, n := range names {
		count, extra := 3, []string(nil)
		if kinds[n] == "tiered" {
			count = 2
			extra = []string{"--redis", redistest.New(t).URL, "--postgres", pgtest.StartServer(t).DSN(t), "--flush-interval", interval.String()}
		}
		for i := range count {
			host, ports, command := loopback(t, i)
			nd := newNode(t, fmt.Sprintf("%s%d", n, i+1), host, ports, command)
			nd.extra = extra
			nodes[n] = append(nodes[n], nd)
			all = append(all, nd)
		}
		if kinds[n] == "cluster" {
			var seeds []string
			for _, nd := range nodes[n] {
				seeds = append(seeds, nd.gossip)
			}
			for _, nd := range nodes[n] {
				nd.join = strings.Join(seeds, ",")
			}
		}
	}
	// Every gateway of a region is reached from the other region through
	// its own proxy; cutting them all cuts the regions apart.
	proxies := map[*cnode]*cutProxy{}
	for _, nd := range all {
		proxies[nd] = newCutProxy(t, nd.grpc)
	}
	for _, n := range names {
		var peers []string
		for _, o := range names {
			if o == n {
				continue
			}
			for _, g := range nodes[o] {
				peers = append(peers, o+"="+proxies[g].addr())
			}
		}
		for _, nd := range nodes[n] {
			nd.extra = append(nd.extra, "--region", n, "--peer-regions", strings.Join(peers, ","), "--region-interval", interval.String())
		}
	}
	for _, nd := range all {
		nd.start(t)
	}
	for _, n := range names {
		if kinds[n] == "cluster" {
			waitAlive(t, nodes[n], 60*time.Second)
		}
	}
	cut := func(on bool) {
		for _, p := range proxies {
			p.setCut(on)
		}
	}

	// own[region][id] is the region's part of id: the sum of the
	// increments acknowledged in the region since its last delete of id.
	var mu sync.Mutex
	own := map[string]map[string]int64{"a": {}, "b": {}}
	ids := map[string]bool{}
	shared := []string{"views:home", "views:about", "views:gone"}
	write := func(round int) {
		var wg sync.WaitGroup
		for ri, n := range names {
			for ni, nd := range nodes[n] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 12 {
						id := shared[i%len(shared)]
						if i%4 == 3 {
							id = fmt.Sprintf("signups:%s-%d", n, i%2)
						}
						delta := int64(1 + (i+ri+ni+round)%5)
						code, _, _, err := post(nd.url+"/counters/"+id+"/increment", "", fmt.Sprintf(`{"delta":%d}`, delta))
						if err != nil || code != 200 {
							continue // not acknowledged: not counted
						}
						mu.Lock()
						own[n][id] += delta
						ids[id] = true
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
	}
	// del deletes region n's part of id (on its first node).
	del := func(n, id string) {
		t.Helper()
		req := nodes[n][0].url + "/counters/" + id
		code, err := httpDelete(req)
		if err != nil || code/100 != 2 {
			t.Fatalf("DELETE %s: %d %v", req, code, err)
		}
		mu.Lock()
		delete(own[n], id)
		mu.Unlock()
	}
	want := func(id string) int64 { return own["a"][id] + own["b"][id] }
	converged := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := start.Add(90 * time.Second)
		for {
			bad := ""
		all:
			for _, n := range names {
				for _, nd := range nodes[n] {
					for id := range ids {
						if g := getGlobal(t, nd.url, id); g.Value != want(id) {
							bad = fmt.Sprintf("region %s at %s: global %s = %d, want %d (%+v)", n, nd.id, id, g.Value, want(id), g.Regions)
							break all
						}
					}
				}
			}
			if bad == "" {
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				for _, n := range names {
					for _, nd := range nodes[n] {
						for id := range ids {
							t.Logf("%s: local %s = %d (region %s's part: %d)", nd.id, id, getValue(t, nd.url, id), n, own[n][id])
						}
					}
				}
				t.Fatalf("%s: not converged after 90 s: %s", what, bad)
			}
			time.Sleep(interval / 2)
		}
	}
	checkLocal := func() {
		t.Helper()
		for _, n := range names {
			for _, nd := range nodes[n] {
				for id := range ids {
					if got := getValue(t, nd.url, id); got != own[n][id] {
						t.Fatalf("region %s at %s: local %s = %d, want %d", n, nd.id, id, got, own[n][id])
					}
				}
			}
		}
	}

	write(0)
	converged("before the cut")
	checkLocal()

	cut(true)
	write(1) // both regions accept writes while cut apart
	// The delete waits for the write-behind of the increments before it,
	// and the increments after it for the delete's (in a tiered region
	// of several nodes a delete is not ordered with another node's
	// increments still in its write-behind; docs/redis-tier.md).
	time.Sleep(5 * interval)
	del("a", "views:gone")
	time.Sleep(5 * interval)
	write(2)
	// Neither region sees the other's writes made during the cut.
	time.Sleep(3 * interval)
	for _, n := range names {
		other := names[0]
		if other == n {
			other = names[1]
		}
		id := "signups:" + other + "-1"
		for _, nd := range nodes[n] {
			if g := getGlobal(t, nd.url, id); g.Value == want(id) {
				t.Fatalf("%s sees %s's writes made during the cut: %+v", nd.id, other, g)
			}
		}
	}
	cut(false)
	took := converged("after the heal")
	t.Logf("%s and %s regions converged %v after the heal (replication interval %v)", kindA, kindB, took.Round(time.Millisecond), interval)
	checkLocal()
	write(3)
	converged("after more writes")

	// A tiered node restarted on an empty --data directory (a stateless
	// node replaced) gets its copies of the peer regions back by
	// anti-entropy and answers global reads exactly again.
	for _, n := range names {
		if kinds[n] != "tiered" {
			continue
		}
		nd := nodes[n][1]
		nd.term(t)
		nd.dir = t.TempDir()
		nd.start(t)
		write(4)
		converged("after " + nd.id + " restarted empty")
	}
}

// httpDelete sends DELETE url and returns the status.
func httpDelete(url string) (int, error) {
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
