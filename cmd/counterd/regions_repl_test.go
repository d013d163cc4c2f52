package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/netns"
)

// cutProxy forwards TCP connections to a target until cut: then it closes
// every open connection and closes new ones at once, as a network cut
// would make every call fail; heal forwards again. It stands between
// regions so that one region can be cut off while it keeps running and
// accepting writes.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go serveEach(ln, p.serve)
	return p
}

// serveEach hands each connection ln accepts to serve, on its own
// goroutine, until ln is closed.
func serveEach(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c)
	}
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) serve(c net.Conn) {
	if !p.track(c) {
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(u) {
		c.Close()
		return
	}
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

type globalView struct {
	Kind    string
	Exists  bool
	Value   int64
	Regions []struct {
		Region string
		Value  int64
		AsOf   *time.Time `json:"as_of"`
	}
}

func getGlobal(t testing.TB, base, id string) globalView {
	t.Helper()
	resp, err := client.Get(base + "/counters/" + id + "?scope=global")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g globalView
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil || resp.StatusCode != 200 {
		t.Fatalf("global read of %s: %d %v", id, resp.StatusCode, err)
	}
	return g
}

// regionNet is where TestRegionsCutAndHeal's four nodes run (a1, b1,
// b2, c1: node i of place) and how region c is cut off from the others.
type regionNet struct {
	place placement
	setup func(nodes []*cnode)         // once the nodes' addresses are known
	dial  func(from, to *cnode) string // the gRPC address from dials to reach to
	cut   func(on bool)
}

// TestRegionsCutAndHeal runs three regions on loopback (runRegionsCutAndHeal).
// Every link into and out of region c goes through a proxy that can cut it.
func TestRegionsCutAndHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs four counterd processes")
	}
	var toC *cutProxy
	fromC := map[string]*cutProxy{}
	runRegionsCutAndHeal(t, regionNet{
		place: loopback,
		// toC: the others dial c through it; fromC[x]: c dials x.
		setup: func(nodes []*cnode) {
			toC = newCutProxy(t, nodes[3].grpc)
			for _, n := range nodes[:3] {
				fromC[n.id] = newCutProxy(t, n.grpc)
			}
		},
		dial: func(from, to *cnode) string {
			switch {
			case from.id == "c1":
				return fromC[to.id].addr()
			case to.id == "c1":
				return toC.addr()
			}
			return to.grpc
		},
		cut: func(on bool) {
			toC.setCut(on)
			for _, p := range fromC {
				p.setCut(on)
			}
		},
	})
}

// TestRegionsCutAndHealNetns is TestRegionsCutAndHeal with every node in
// its own network namespace (root only: netns.New skips otherwise), region
// c cut off by prohibit routes, and every packet delayed by 10 ms (a link
// 20 ms) with tc netem when the kernel has it (without, the test says so
// and runs without the delay).
func TestRegionsCutAndHealNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four counterd processes in network namespaces")
	}
	nw := netns.New(t, 4)
	for i := range 4 {
		if err := nw.Delay(i, 10*time.Millisecond); err != nil {
			t.Logf("running without a delay: %v", err)
			break
		}
	}
	runRegionsCutAndHeal(t, regionNet{
		place: inNetns(nw),
		dial:  func(_, to *cnode) string { return to.grpc },
		cut: func(on bool) {
			err := nw.Heal()
			if on {
				err = nw.Partition([]int{3}, []int{0, 1, 2})
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}

// runRegionsCutAndHeal runs three regions: a and c one counterd process
// each, b a cluster of two (b1, b2, --join), each of whose nodes ships the
// counters it owns and receives pushes of its own (every region lists
// both of b's gateways). Writes go to every region (in b, to both nodes:
// forwarded to the owner, or pn adds applied where they arrive and pushed
// to the owner): counters every region shares and pn counters, each
// region's own. Then c is cut off, every region keeps accepting writes,
// the link heals, and the global value read on every node converges to
// exactly the sum of the acknowledged writes. b2 leaves and comes back
// (ownership moves in b both ways), with the same check. Last, c restarts
// from an empty data directory and bootstraps by chunked sync from the
// other regions' copies of its state.
func runRegionsCutAndHeal(t *testing.T, net regionNet) {
	const interval = 200 * time.Millisecond
	names := []string{"a", "b", "c"}
	var all []*cnode
	for i, id := range []string{"a1", "b1", "b2", "c1"} {
		host, ports, command := net.place(t, i)
		all = append(all, newNode(t, id, host, ports, command))
	}
	a1, b1, b2, c1 := all[0], all[1], all[2], all[3]
	bNodes := []*cnode{b1, b2}
	gateways := map[string][]*cnode{"a": {a1}, "b": bNodes, "c": {c1}}
	if net.setup != nil {
		net.setup(all)
	}
	peersOf := func(self *cnode, region string) string {
		var l []string
		for _, n := range names {
			for _, g := range gateways[n] {
				if n != region {
					l = append(l, n+"="+net.dial(self, g))
				}
			}
		}
		return strings.Join(l, ",")
	}
	for _, n := range names {
		for _, nd := range gateways[n] {
			nd.extra = []string{"--region", n, "--peer-regions", peersOf(nd, n), "--region-interval", interval.String()}
		}
	}
	for _, nd := range bNodes {
		nd.join = b1.gossip + "," + b2.gossip
	}
	for _, nd := range all {
		nd.start(t)
	}
	waitAlive(t, bNodes, 60*time.Second)
	// nodes lists the HTTP addresses of each region's running nodes.
	nodes := func(n string) []string {
		var l []string
		for _, nd := range gateways[n] {
			if nd.p != nil {
				l = append(l, nd.url)
			}
		}
		return l
	}
	cut := net.cut

	// want is the sum of acknowledged writes per id; own is each
	// region's part.
	var mu sync.Mutex
	want := map[string]int64{}
	own := map[string]map[string]int64{"a": {}, "b": {}, "c": {}}
	shared := []string{"views:home", "views:about", "views:pricing"}
	write := func(round int) {
		var wg sync.WaitGroup
		for ri, n := range names {
			wg.Add(1)
			go func(ri int, n string) {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					id, body := shared[i%len(shared)], fmt.Sprintf(`{"delta":%d}`, 1+(i+ri+round)%5)
					delta := int64(1 + (i+ri+round)%5)
					if i%3 == 2 {
						id, body, delta = fmt.Sprintf("likes:%s-%d", n, i%4), `{"delta":2,"kind":"pn"}`, 2
					}
					at := nodes(n)[i%len(nodes(n))]
					code, _, _, err := post(at+"/counters/"+id+"/increment", "", body)
					if err != nil || code != 200 {
						continue // not acknowledged: not counted
					}
					mu.Lock()
					want[id] += delta
					own[n][id] += delta
					mu.Unlock()
				}
			}(ri, n)
		}
		wg.Wait()
	}
	// converged waits until the global value of every id read on every
	// node of every region is want's and returns how long it took.
	converged := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := start.Add(90 * time.Second)
		for {
			bad := ""
		all:
			for _, n := range names {
				for _, at := range nodes(n) {
					for id, v := range want {
						if g := getGlobal(t, at, id); g.Value != v {
							bad = fmt.Sprintf("region %s at %s: global %s = %d, want %d (%+v)", n, at, id, g.Value, v, g.Regions)
							break all
						}
					}
				}
			}
			if bad == "" {
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not converged after 90 s: %s", what, bad)
			}
			time.Sleep(interval / 2)
		}
	}

	write(0)
	converged("before the cut")
	for _, n := range names {
		for _, at := range nodes(n) {
			for id, v := range own[n] {
				if got := getValue(t, at, id); got != v && !strings.HasPrefix(id, "views:") {
					t.Fatalf("region %s at %s: local %s = %d, want %d", n, at, id, got, v)
				}
			}
		}
	}

	cut(true)
	write(1) // every region, c included, accepts writes while cut off
	write(2)
	// a and b do not see c's new writes yet; c reports them pending.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st struct {
			Peers []struct {
				Name, Addr string
				Pending    int
				LagSeconds float64 `json:"lag_seconds"`
			}
		}
		resp, err := client.Get(c1.url + "/regions")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Peers) == 2 && st.Peers[0].Pending > 0 && st.Peers[0].LagSeconds > 0 && st.Peers[1].Name == "b" && strings.Count(st.Peers[1].Addr, ",") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c reports nothing pending during the cut: %+v", st)
		}
		time.Sleep(interval)
	}
	for _, at := range append(nodes("a"), nodes("b")...) {
		if g := getGlobal(t, at, "likes:c-2"); g.Value == want["likes:c-2"] {
			t.Fatalf("%s already sees c's writes made during the cut: %+v", at, g)
		}
	}
	time.Sleep(3 * interval) // the pushes keep failing for a while
	cut(false)
	took := converged("after the heal")
	t.Logf("converged %v (%.1f replication intervals of %v) after the heal", took.Round(time.Millisecond), float64(took)/float64(interval), interval)

	// Both of b's nodes push to a; a's view of b is the older of their
	// as-ofs.
	var st struct {
		Peers []struct {
			Name    string
			Senders []struct{ Node string }
		}
	}
	resp, err := client.Get(a1.url + "/regions")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Peers) != 2 || st.Peers[0].Name != "b" || len(st.Peers[0].Senders) != 2 || st.Peers[0].Senders[1].Node != "b2" {
		t.Fatalf("a's GET /regions: %+v %v", st, err)
	}

	// Ownership in b changes: b2 leaves (handing its counters to b1,
	// which ships every counter it now owns), writes go on, b2 comes
	// back and takes its counters again. Nothing is lost or counted
	// twice.
	b2.term(t)
	write(4)
	converged("after b2 left")
	b2.start(t)
	waitAlive(t, bNodes, 60*time.Second)
	write(5)
	converged("after b2 came back")

	// c restarts from an empty data directory: it gets its own counters
	// back from a's and b's copies of its state, and the copies of
	// theirs, by chunked sync.
	c1.term(t)
	c1.dir = t.TempDir()
	c1.start(t)
	if log := c1.logs.tail(400); !strings.Contains(log[max(0, strings.LastIndex(log, "=== ")):], "region bootstrap done") {
		t.Fatalf("c did not bootstrap:\n%s", log)
	}
	for id, v := range own["c"] {
		if got := getValue(t, c1.url, id); got != v {
			t.Fatalf("c after bootstrap: local %s = %d, want %d", id, got, v)
		}
	}
	write(3)
	converged("after c's bootstrap")

	// The same global read through the Go client and RESP.
	ctx := context.Background()
	cl, err := cdclient.New(a1.url)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cl.GetGlobal(ctx, "views:home")
	if v, _ := g.Value.Int64(); err != nil || v != want["views:home"] || len(g.Regions) != 3 {
		t.Fatalf("client GetGlobal: %+v %v, want %d", g, err, want["views:home"])
	}
	for _, r := range g.Regions {
		if r.AsOf == nil || time.Since(*r.AsOf) > time.Minute {
			t.Fatalf("region %s: as_of %v", r.Region, r.AsOf)
		}
	}
	if c, err := cl.GetScope(ctx, "views:home", cdclient.ScopeLocal); err != nil || c.Value != getValue(t, a1.url, "views:home") {
		t.Fatalf("client GetScope local: %+v %v", c, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: a1.resp, Protocol: 2})
	defer rdb.Close()
	rep, err := rdb.Do(ctx, "COUNTERD.GET", "views:home", "SCOPE", "global").Slice()
	if err != nil || len(rep) != 1+3*3 || rep[0] != strconv.FormatInt(want["views:home"], 10) || rep[1] != "a" {
		t.Fatalf("COUNTERD.GET SCOPE global: %v %v", rep, err)
	}
	if err := rdb.Do(ctx, "COUNTERD.GET", "views:home", "SCOPE", "planet").Err(); err == nil || !strings.Contains(err.Error(), "SCOPE must be") {
		t.Fatalf("bad scope: %v", err)
	}
	resp, err = client.Get(a1.url + "/counters/views:home?scope=planet")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("scope=planet: %d, want 400", resp.StatusCode)
	}
}
