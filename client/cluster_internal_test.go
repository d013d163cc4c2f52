package client

import (
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBreakerTransitions(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(3, time.Second, func() time.Time { return now })
	step := func(what string, want BreakerState) {
		t.Helper()
		if got := b.current(); got != want {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	b.failure()
	b.failure()
	b.success() // a success resets the count
	b.failure()
	b.failure()
	step("4 failures, not consecutive", BreakerClosed)
	b.failure()
	step("3 consecutive", BreakerOpen)
	if b.allow() {
		t.Fatal("open breaker allowed a request")
	}
	now = now.Add(time.Second - 1)
	if b.allow() {
		t.Fatal("allowed before the cool-down")
	}
	now = now.Add(1)
	step("cool-down over", BreakerHalfOpen)
	if !b.allow() || b.allow() {
		t.Fatal("half-open must allow exactly one probe")
	}
	b.release() // the probe's caller gave up
	if !b.allow() {
		t.Fatal("no new probe after a released one")
	}
	b.failure()
	step("failed probe", BreakerOpen)
	b.failure() // a late failure of a request sent before: no change
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no probe after the second cool-down")
	}
	b.success()
	step("good probe", BreakerClosed)
	for range 10 {
		if !b.allow() {
			t.Fatal("closed breaker refused")
		}
	}
	for s, want := range map[BreakerState]string{BreakerClosed: "closed", BreakerOpen: "open", BreakerHalfOpen: "half-open", 9: "unknown"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

// routeID recovers every id from the paths the client builds, and finds
// no id in the paths on many ids.
func TestRouteIDProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.String().Draw(t, "id")
		if id == "" {
			return
		}
		rest := rapid.SampledFrom([][]string{nil, {"increment"}, {"ttl"}, {"fields", escape("f/x")}, {"series"}}).Draw(t, "rest")
		if got := routeID(counterPath(id, rest...)); got != id {
			t.Fatalf("routeID(%q) = %q, want %q", counterPath(id, rest...), got, id)
		}
	})
	for _, p := range []string{"/counters", "/counters/", "/counters/user%3A*/aggregate", "/batch", "/pfcount", "/rollups/x", "/ratelimit/check", "/counters/%zz"} {
		if got := routeID(p); got != "" {
			t.Errorf("routeID(%q) = %q, want none", p, got)
		}
	}
}

const exampleDoc = `{"self":"n1","ring_version":7,"vnodes":100,"replication_factor":3,
 "members":[{"id":"n1","state":"alive","gossip":"127.0.0.1:7946","http":"127.0.0.1:8080","resp":"127.0.0.1:6380","grpc":"127.0.0.1:9090","ownership":0.334},
            {"id":"n2","state":"dead","http":""}]}`

func TestParseClusterDoc(t *testing.T) {
	d, err := parseClusterDoc([]byte(exampleDoc))
	if err != nil {
		t.Fatal(err)
	}
	if d.Self != "n1" || d.RingVersion != 7 || d.VNodes != 100 || d.ReplicationFactor != 3 || len(d.Members) != 2 ||
		d.Members[0].HTTP != "127.0.0.1:8080" || d.Members[0].Ownership != 0.334 {
		t.Fatalf("%+v", d)
	}
	for _, bad := range []string{
		``, `[]`, `{"members":[]}`,
		`{"members":[{"id":"n1","state":"dead","http":"x:1"}]}`,
		`{"members":[{"id":"","state":"alive","http":"x:1"}]}`,
		`{"members":[{"id":"a","state":"alive","http":"x:1"},{"id":"a","state":"alive","http":"x:1"}]}`,
		`{"members":[{"id":"a","state":"alive","http":""}]}`,
		`{"members":[{"id":"a","state":"alive","http":"x:1 2"},{"id":"b","state":"alive"}]}`,
		`{"members":[{"id":"a","state":"alive","http":"x:1/path"}]}`,
		`{"members":[{"id":"a","state":"alive","http":"ftp://x:1"}]}`,
		`{"vnodes":-1,"members":[{"id":"a","state":"alive","http":"x:1"}]}`,
		`{"vnodes":10001,"members":[{"id":"a","state":"alive","http":"x:1"}]}`,
		`{"replication_factor":-1,"members":[{"id":"a","state":"alive","http":"x:1"}]}`,
	} {
		if _, err := parseClusterDoc([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzParseClusterDoc: a document is accepted only if a view can be built
// from it, and an accepted document survives a JSON round trip.
func FuzzParseClusterDoc(f *testing.F) {
	f.Add(exampleDoc)
	f.Add(`{"members":[{"id":"a","state":"alive","http":"https://[::1]:1"}],"vnodes":1}`)
	f.Add(`{"members":[{"id":"a","state":"alive","http":"x:1"},{"id":"b","state":"left","http":"%%"}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseClusterDoc([]byte(s))
		if err != nil {
			return
		}
		cs := &clusterState{cfg: defaultClusterConfig(), breakers: map[string]*breaker{}, seen: map[string]uint64{}}
		cs.seeds = append(cs.seeds, mustURL(t, "http://seed:1"))
		cs.install(d)
		v := cs.view.Load()
		if len(v.routable) == 0 {
			t.Fatalf("view of %s: nothing routable", s)
		}
		for _, m := range v.routable {
			if m.host == "" || m.scheme == "" || m.state != "alive" {
				t.Fatalf("routable member %+v", m)
			}
		}
		for _, id := range v.ring.Nodes() {
			if m := v.byID[id]; m == nil || m.state != "alive" {
				t.Fatalf("ring node %q is not an alive member", id)
			}
		}
		if m, err := cs.pick("x", nil); err != nil || m.host == "" {
			t.Fatalf("pick: %+v, %v", m, err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := parseClusterDoc(b)
		if err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("round trip of %s: %+v, %v", s, d2, err)
		}
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := parseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
