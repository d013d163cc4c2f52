package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/counterd/counterd/api/counterd/cluster/v1"
	"github.com/counterd/counterd/internal/cluster/ring"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
	"github.com/counterd/counterd/internal/rollup"
)

func TestClusterEndpoint(t *testing.T) {
	c := newTestCluster(t, "n1", "n2", "n3")
	n1 := c.node("n1").n
	rec := httptest.NewRecorder()
	n1.Routes()["/cluster"].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cluster", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	// Decode into a generic map: the field names are a contract.
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"self", "ring_version", "vnodes", "replication_factor", "members"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("no %q in %s", k, rec.Body)
		}
	}
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Self != "n1" || st.VNodes != 100 || st.ReplicationFactor != 3 || len(st.Members) != 3 {
		t.Fatalf("status %+v", st)
	}
	if h := rec.Header().Get(RingVersionHeader); h != strconv.FormatUint(st.RingVersion, 10) {
		t.Fatalf("header %q, ring_version %d", h, st.RingVersion)
	}
	sum := 0.0
	for i, m := range st.Members {
		if m.ID != []string{"n1", "n2", "n3"}[i] || m.State != "alive" || m.GRPC == "" || m.Gossip == "" {
			t.Fatalf("member %+v", m)
		}
		sum += m.Ownership
	}
	if sum < 0.997 || sum > 1.003 {
		t.Fatalf("ownership sums to %v", sum)
	}
	// A client rebuilding the ring from the answer places ids like the node.
	if !st.HashTags {
		t.Fatal("hash_tags false: every member supports placement by tag")
	}
	r := ring.New(ring.Config{VirtualNodes: st.VNodes, ReplicationFactor: st.ReplicationFactor})
	r.SetTags([]string{"n1", "n2", "n3"}, st.HashTags)
	for _, id := range []string{"a", "b", "page_views:article_123", "{user:1}:a", "{user:1}:b"} {
		if r.Owner(id) != n1.Ring().Owner(id) {
			t.Fatalf("owner of %q differs", id)
		}
	}

	c.kill("n3")
	c.waitRing("n1", "n2")
	rec = httptest.NewRecorder()
	n1.Routes()["/cluster"].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cluster", nil))
	_ = json.Unmarshal(rec.Body.Bytes(), &st)
	if m := st.Members[2]; m.ID != "n3" || m.State != "dead" || m.Ownership != 0 {
		t.Fatalf("killed member %+v", m)
	}
	rec = httptest.NewRecorder()
	n1.Routes()["/cluster"].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cluster/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "counterd_cluster_ring_version") {
		t.Fatalf("metrics: %d", rec.Code)
	}
}

func TestWireErrorsKeepSentinels(t *testing.T) {
	for _, sentinel := range []error{contract.ErrInvalidID, contract.ErrWrongKind, contract.ErrOverflow,
		contract.ErrVersionConflict, contract.ErrIdempotencyReuse, contract.ErrUnavailable, contract.ErrClosed} {
		err := toWire(&contract.BatchError{Index: 2, Err: sentinel}).err("n2", func(i int) int { return i + 10 })
		var be *contract.BatchError
		if !errors.Is(err, sentinel) || !errors.As(err, &be) || be.Index != 12 {
			t.Errorf("%v: round trip gave %v", sentinel, err)
		}
	}
	err := toWire(&WrongOwnerError{ID: "x", Owner: "n3", RingVersion: 4}).err("n2", nil)
	var wo *WrongOwnerError
	if !errors.As(err, &wo) || wo.Owner != "n3" || !errors.Is(err, contract.ErrUnavailable) {
		t.Errorf("wrong owner round trip: %v", err)
	}
	if toWire(nil).err("n1", nil) != nil {
		t.Error("nil error round trip")
	}
}

func TestSeriesRoundTrip(t *testing.T) {
	ecfg := engine.DefaultConfig()
	ecfg.InMemory, ecfg.Logger = true, testLogger("s")
	eng, err := engine.Open(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := eng.SetRollup("s", rollup.DefaultSpec()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := eng.Add(ctx, "s:x", 2, contract.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	now := eng.Now()
	want, err := eng.Series("s:x", rollup.Minute, now.Add(-10*time.Minute), now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(pbSeries(toWireSeries(want)))
	if err != nil {
		t.Fatal(err)
	}
	var m pb.Series
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var d decoder
	got, err := d.series(&m).series()
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != want.Total || len(got.Values) != len(want.Values) || got.Start(3) != want.Start(3) {
		t.Fatalf("series %+v, want %+v", got, want)
	}
}

func TestChunksBoundMessages(t *testing.T) {
	big := make([]byte, maxBytesPerCall/3+1)
	states := make([]State, 0, 1200)
	for i := 0; i < 1200; i++ {
		st := State{ID: strconv.Itoa(i)}
		if i%100 == 0 {
			st.Data = big
		}
		states = append(states, st)
	}
	total := 0
	for _, c := range chunks(states) {
		size := 0
		for _, st := range c {
			size += len(st.Data)
		}
		if len(c) == 0 || len(c) > maxStatesPerCall || (size > maxBytesPerCall && len(c) > 1) {
			t.Fatalf("chunk of %d states, %d bytes", len(c), size)
		}
		total += len(c)
	}
	if total != len(states) || len(chunks(nil)) != 0 {
		t.Fatalf("chunks cover %d of %d states", total, len(states))
	}
}
