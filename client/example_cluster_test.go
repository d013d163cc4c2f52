package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/counterd/counterd/client"
)

// exampleCluster is n real HTTP APIs over separate in-memory engines, each
// also serving GET /cluster and the Counterd-Ring-Version header as a
// cluster node does. The engines do not forward, so every operation on an
// id must reach the same node: the Cluster's routing is what makes the
// examples below add up.
type exampleCluster struct {
	srvs  []*httptest.Server
	stops []func()
}

func startExampleCluster(n int) *exampleCluster {
	ec := &exampleCluster{}
	for range n {
		h, closeEngine, err := newHandler()
		if err != nil {
			panic(err)
		}
		srv := httptest.NewUnstartedServer(nil)
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(client.RingVersionHeader, "7")
			if r.URL.Path == "/cluster" {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(ec.doc(srv))
				return
			}
			h.ServeHTTP(w, r)
		})
		ec.srvs = append(ec.srvs, srv)
		ec.stops = append(ec.stops, closeEngine)
	}
	for _, s := range ec.srvs {
		s.Start()
	}
	return ec
}

func (ec *exampleCluster) doc(self *httptest.Server) map[string]any {
	var members []map[string]any
	selfID := ""
	for i, s := range ec.srvs {
		id := fmt.Sprintf("n%d", i+1)
		if s == self {
			selfID = id
		}
		members = append(members, map[string]any{"id": id, "state": "alive", "http": s.Listener.Addr().String()})
	}
	return map[string]any{"self": selfID, "ring_version": 7, "vnodes": 100, "replication_factor": 3, "members": members}
}

func (ec *exampleCluster) seeds() []string { return []string{ec.srvs[0].URL} }

func (ec *exampleCluster) stop() {
	for i, s := range ec.srvs {
		s.Close()
		ec.stops[i]()
	}
}

func ExampleNewCluster() {
	ec := startExampleCluster(3)
	defer ec.stop()

	// One seed is enough: the client learns the other nodes from it.
	c, err := client.NewCluster(ec.seeds(), client.WithRefreshInterval(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// Each id goes straight to the node that owns it.
	for _, id := range []string{"page_views:article_1", "page_views:article_2", "page_views:article_4"} {
		for range 3 {
			if _, err := c.Incr(ctx, id, 1); err != nil {
				log.Fatal(err)
			}
		}
		v, _ := c.Get(ctx, id)
		fmt.Println(id, v.Value, "on", c.Owner(id))
	}
	fmt.Println("ring version", c.RingVersion(), "nodes", len(c.Nodes()))
	// Output:
	// page_views:article_1 3 on n2
	// page_views:article_2 3 on n3
	// page_views:article_4 3 on n1
	// ring version 7 nodes 3
}

// When a node stops answering, calls for the ids it owns are retried on
// the next replica (with the same Idempotency-Key), and after the
// breaker's threshold of consecutive failures the node is skipped until
// its cool-down has passed.
func ExampleWithBreaker() {
	ec := startExampleCluster(3)
	defer ec.stop()
	c, err := client.NewCluster(ec.seeds(),
		client.WithBreaker(2, time.Minute),
		client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	ec.srvs[1].Close() // n2, the owner of articles 1 and 3, goes away
	for _, id := range []string{"page_views:article_1", "page_views:article_3", "page_views:article_1"} {
		r, err := c.Incr(ctx, id, 1)
		fmt.Println(id, r.Value, err)
	}
	var states []string
	for _, n := range c.Nodes() {
		states = append(states, n.ID+":"+n.Breaker.String())
	}
	fmt.Println(strings.Join(states, " "))
	// Output:
	// page_views:article_1 1 <nil>
	// page_views:article_3 1 <nil>
	// page_views:article_1 2 <nil>
	// n1:closed n2:open n3:closed
}
