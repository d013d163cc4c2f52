package main

// End-to-end tests of the event pipeline: a collector-only counterd takes
// batches on POST /events and appends them to the stream, a consumer
// counterd applies the rules; the consumer is SIGKILLed twice during the
// run and restarted on the same data directory. Kafka is franz-go's kfake,
// an in-process Kafka-protocol cluster (the test process serves it on a
// loopback port; the counterd processes talk to it over real
// connections). NATS is a real nats-server with JetStream (natstest).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/counterd/counterd/internal/testutil/natstest"
	"github.com/counterd/counterd/internal/testutil/pipelinetest"
)

const pipelineRules = pipelinetest.ImpressionRules

// workload is the events of a run and what they must count.
type workload struct {
	batches   [][]byte         // NDJSON batches, in sending order
	views     map[string]int64 // post -> views (unique ids, bot excluded)
	countries map[string]map[string]int64
	viewers   map[string]map[string]bool
	malformed map[string]bool // ids whose rule fails: the dead letters
	total     int64
	events    int
}

// makeWorkload builds n events: 1% malformed (a numeric post: the counter
// template fails), 10% copies of an earlier event (same id), the rest
// valid impressions of 20 posts by 5000 users, a few of them bots.
func makeWorkload(n, batch int) *workload {
	r := rand.New(rand.NewPCG(1, 2))
	w := &workload{views: map[string]int64{}, countries: map[string]map[string]int64{},
		viewers: map[string]map[string]bool{}, malformed: map[string]bool{}}
	var lines [][]byte
	var valid [][]byte
	ts := time.Now().UnixMilli()
	for i := 0; len(lines) < n; i++ {
		switch {
		case len(lines)%100 == 50:
			id := fmt.Sprintf("bad-%d", i)
			w.malformed[id] = true
			lines = append(lines, fmt.Appendf(nil, `{"id":%q,"type":"impression","ts":%d,"post":%d,"user":"u1","country":"de"}`, id, ts, i))
		case len(lines)%10 == 5 && len(valid) > 0:
			lines = append(lines, valid[r.IntN(len(valid))])
		default:
			post := fmt.Sprintf("p%d", r.IntN(20))
			user := fmt.Sprintf("u%d", r.IntN(5000))
			country := []string{"de", "fr", "us", "br", "jp"}[r.IntN(5)]
			bot := r.IntN(50) == 0
			l := fmt.Appendf(nil, `{"id":"ev-%d","type":"impression","ts":%d,"post":%q,"user":%q,"country":%q,"bot":%t}`, i, ts, post, user, country, bot)
			lines = append(lines, l)
			valid = append(valid, l)
			if !bot {
				w.views[post]++
				w.total++
			}
			if w.countries[post] == nil {
				w.countries[post] = map[string]int64{}
				w.viewers[post] = map[string]bool{}
			}
			w.countries[post][country]++
			w.viewers[post][user] = true
		}
	}
	w.events = len(lines)
	for i := 0; i < len(lines); i += batch {
		w.batches = append(w.batches, append(bytesJoin(lines[i:min(i+batch, len(lines))]), '\n'))
	}
	return w
}

func bytesJoin(ls [][]byte) []byte {
	var b []byte
	for i, l := range ls {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, l...)
	}
	return b
}

// pipelineSize is the events of a run: 100,000 (the figure), or
// 20,000 with -short.
func pipelineSize() int {
	if testing.Short() {
		return 20000
	}
	return 100000
}

// runPipeline sends w through a collector-only node, kills the consumer
// twice, and checks every counter once the views add up.
func runPipeline(t *testing.T, w *workload, streamArgs []string) (consumer *proc) {
	t.Helper()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(pipelineRules), 0o644); err != nil {
		t.Fatal(err)
	}
	col := start(t, t.TempDir(), append([]string{"--events-no-consume"}, streamArgs...)...)
	consDir := t.TempDir()
	consArgs := append([]string{"--rules", rulesPath, "--node-id", "consumer-1"}, streamArgs...)
	cons := start(t, consDir, consArgs...)

	began := time.Now()
	var sendErr atomic.Pointer[error]
	fail := func(err error) { sendErr.Store(&err) }
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, b := range w.batches {
			resp, err := client.Post(col.addr+"/events", "application/x-ndjson", strings.NewReader(string(b)))
			if err != nil {
				fail(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				fail(fmt.Errorf("POST /events answered %d: %s", resp.StatusCode, body))
				return
			}
		}
	})
	applied := func(p *proc) int64 {
		resp, err := client.Get(p.addr + "/counters/views:*/aggregate")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var m struct{ Value int64 }
		json.NewDecoder(resp.Body).Decode(&m)
		return m.Value
	}
	// SIGKILL the consumer twice while it works, restart it each time.
	for _, frac := range []float64{0.2, 0.55} {
		want := int64(frac * float64(w.total))
		deadline := time.Now().Add(60 * time.Second)
		for applied(cons) < want && time.Now().Before(deadline) && sendErr.Load() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if err := sendErr.Load(); err != nil {
			t.Fatal(*err)
		}
		got := applied(cons)
		cons.kill(t)
		t.Logf("%v: consumer killed at %d of %d views", time.Since(began).Round(time.Millisecond), got, w.total)
		cons = start(t, consDir, consArgs...)
	}
	wg.Wait()
	if err := sendErr.Load(); err != nil {
		t.Fatal(*err)
	}
	t.Logf("%v: all %d batches collected", time.Since(began).Round(time.Millisecond), len(w.batches))
	if err := poll(90*time.Second, func() error {
		if got := applied(cons); got != w.total {
			return fmt.Errorf("views add up to %d, want %d", got, w.total)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: every view applied", time.Since(began).Round(time.Millisecond))
	checkCounts(t, cons.addr, w)
	t.Logf("%v: counts checked", time.Since(began).Round(time.Millisecond))
	return cons
}

func checkCounts(t *testing.T, base string, w *workload) {
	t.Helper()
	for post, want := range w.views {
		if got := getValue(t, base, "views:"+post); got != want {
			t.Errorf("views:%s = %d, want %d", post, got, want)
		}
	}
	for post, want := range w.countries {
		resp, err := client.Get(base + "/counters/countries:" + post + "/fields")
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Fields map[string]int64 }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		for c, n := range want {
			if m.Fields[c] != n {
				t.Errorf("countries:%s field %s = %d, want %d", post, c, m.Fields[c], n)
			}
		}
	}
	for post, users := range w.viewers {
		resp, err := client.Get(base + "/counters/viewers:" + post + "/uniques?last=7d")
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Value    float64
			StdError float64 `json:"std_error"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		exact := float64(len(users))
		// Four standard errors of a p=14 sketch: a false failure about
		// once in 16,000 posts.
		if math.Abs(m.Value-exact) > 4*0.0081*exact+1 {
			t.Errorf("viewers:%s over 7d = %v, exact %v (std error %v)", post, m.Value, exact, m.StdError)
		}
	}
}

// checkDead compares the dead letters read from a stream with w.malformed.
func checkDead(t *testing.T, bodies [][]byte, w *workload) {
	t.Helper()
	seen := map[string]bool{}
	for _, b := range bodies {
		var d struct {
			Reason string
			Event  struct{ ID string }
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("dead letter %q: %v", b, err)
		}
		if seen[d.Event.ID] {
			t.Errorf("event %s dead-lettered twice", d.Event.ID)
		}
		seen[d.Event.ID] = true
		if !w.malformed[d.Event.ID] {
			t.Errorf("event %s dead-lettered but not malformed: %s", d.Event.ID, d.Reason)
		}
		if !strings.Contains(d.Reason, "rule \"views\" counter") {
			t.Errorf("dead letter of %s has reason %q", d.Event.ID, d.Reason)
		}
	}
	for id := range w.malformed {
		if !seen[id] {
			t.Errorf("malformed event %s was not dead-lettered", id)
		}
	}
	if t.Failed() {
		t.Fatalf("%d dead letters, %d malformed events", len(bodies), len(w.malformed))
	}
}

// TestPipelineKafkaExactlyOnce runs the pipeline on kfake, franz-go's
// in-process Kafka-protocol cluster (not a real Kafka broker).
func TestPipelineKafkaExactlyOnce(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	broker := kc.ListenAddrs()[0]
	t0 := time.Now()
	w := makeWorkload(pipelineSize(), 1000)
	args := []string{"--kafka", broker, "--kafka-topic", "ev", "--kafka-dead-topic", "ev-dead", "--kafka-partitions", "4"}
	runPipeline(t, w, args)
	t.Logf("%v: pipeline done", time.Since(t0))

	// Read the whole dead-letter topic.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("ev-dead"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var bodies [][]byte
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(bodies) < len(w.malformed) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { bodies = append(bodies, r.Value) })
	}
	// Anything beyond the expected count would arrive with them; give a
	// duplicate a moment to show up.
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	cl.PollFetches(short).EachRecord(func(r *kgo.Record) { bodies = append(bodies, r.Value) })
	t.Logf("%v: read %d dead letters", time.Since(t0), len(bodies))
	checkDead(t, bodies, w)
}

// TestPipelineJetStreamExactlyOnce runs the pipeline on a real NATS
// server with JetStream, with a stream, subjects and durable consumer of
// its own.
func TestPipelineJetStreamExactlyOnce(t *testing.T) {
	url := natstest.New(t)
	name := natstest.Name("T")
	args := []string{"--nats", url, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name, "--nats-ack-wait", "3s"}
	w := makeWorkload(pipelineSize(), 1000)
	runPipeline(t, w, args)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer js.DeleteStream(context.Background(), name)
	oc, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{name + ".dead"}})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer publishes a group's dead letters after applying it, so
	// the last ones may still be on their way when the counts are exact:
	// read until every malformed event's letter is in (or 20 s), then
	// once more a little later for any duplicate.
	var bodies [][]byte
	deadline := time.Now().Add(20 * time.Second)
	for settled := false; ; {
		b, err := oc.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			bodies = append(bodies, m.Data())
			n++
		}
		if n > 0 {
			continue
		}
		if settled || time.Now().After(deadline) {
			break
		}
		settled = len(bodies) >= len(w.malformed)
		time.Sleep(300 * time.Millisecond)
	}
	checkDead(t, bodies, w)
}

// TestPipelineEmbeddedRules: without a stream, POST /events and RESP
// EVENTS.ADD apply at once; a bad rules file stops counterd with the line
// and the CEL error; SIGHUP reloads the rules, and a bad reload keeps the
// old ones.
func TestPipelineEmbeddedRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte("rules:\n  - name: views\n    counter: '\"views:\" + evnt.post'\n    add: '1'\n"), 0o644)
	out, err := exec.Command(counterdBin(t), "--data", filepath.Join(dir, "bad"), "--http", "127.0.0.1:0", "--resp", "", "--grpc", "", "--rules", rulesPath).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "rules.yaml:3: rule \"views\" counter: ERROR: <input>:1:12: undeclared reference to 'evnt'") {
		t.Fatalf("bad rules: %v\n%s", err, out)
	}

	os.WriteFile(rulesPath, []byte("rules:\n  - name: views\n    counter: '\"views:\" + event.post'\n    add: '1'\n"), 0o644)
	p, respAddr := startRESP(t, "--rules", rulesPath)
	send := func(id, postID string) {
		t.Helper()
		code, m, _, err := post(p.addr+"/events", "", fmt.Sprintf(`[{"id":%q,"type":"view","ts":"2026-01-01T00:00:00Z","post":%q}]`, id, postID))
		if err != nil || code != http.StatusAccepted || m["accepted"] != 1.0 {
			t.Fatalf("POST /events: %d %v %v", code, m, err)
		}
	}
	send("a", "p1")
	send("a", "p1") // a copy
	rc := redis.NewClient(&redis.Options{Addr: respAddr})
	defer rc.Close()
	ctx := context.Background()
	if n, err := rc.Do(ctx, "EVENTS.ADD", `{"id":"b","type":"view","ts":1,"post":"p1"}`+"\n"+`{"id":"c","type":"view","ts":2,"post":"p1"}`).Int(); err != nil || n != 2 {
		t.Fatalf("EVENTS.ADD: %d %v", n, err)
	}
	if err := rc.Do(ctx, "EVENTS.ADD", `{"id":"d"}`).Err(); err == nil || !strings.Contains(err.Error(), "invalid event") {
		t.Fatalf("EVENTS.ADD of a bad event: %v", err)
	}
	if v := getValue(t, p.addr, "views:p1"); v != 3 {
		t.Fatalf("views:p1 = %d, want 3", v)
	}

	os.WriteFile(rulesPath, []byte("rules:\n  - name: views\n    counter: '\"v2:\" + event.post'\n    add: '10'\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	n := 0
	if err := poll(20*time.Second, func() error {
		n++
		send(fmt.Sprintf("r%d", n), "p1")
		if v := getValue(t, p.addr, "v2:p1"); v == 0 {
			return errors.New("the reloaded rule does not apply")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(rulesPath, []byte("rules: [\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	if err := poll(20*time.Second, func() error {
		if !strings.Contains(p.logs(), "rules not reloaded, the old ones stay") {
			return errors.New("no log of the refused reload")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := getValue(t, p.addr, "v2:p1")
	send("after-bad-reload", "p1")
	if v := getValue(t, p.addr, "v2:p1"); v != before+10 {
		t.Fatalf("after a refused reload v2:p1 = %d, want %d", v, before+10)
	}
}

// TestPipelineEmbeddedDeadLetters: without a stream, the events the rules
// cannot apply are answered, and kept in the data directory: after a
// SIGKILL and a restart on the same directory GET /events/dead still
// lists each of them with its reason.
func TestPipelineEmbeddedDeadLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesPath, []byte("rules:\n  - name: views\n    counter: '\"views:\" + event.post'\n    add: '1'\n"), 0o644)
	data := filepath.Join(dir, "data")
	p := start(t, data, "--rules", rulesPath)
	code, m, _, err := post(p.addr+"/events", "", `[{"id":"a","type":"view","ts":1,"post":"p1"},{"id":"bad1","type":"view","ts":1},{"id":"bad2","type":"view","ts":1,"post":7}]`)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /events: %d %v %v", code, m, err)
	}
	if dl, _ := m["dead_letters"].([]any); len(dl) != 2 {
		t.Fatalf("answer %v, want 2 dead letters", m)
	}
	p.kill(t)
	p = start(t, data, "--rules", rulesPath)
	var got struct {
		DeadLetters []struct {
			Source string
			Reason string
			Event  struct{ ID string }
		} `json:"dead_letters"`
	}
	resp, err := client.Get(p.addr + "/events/dead?limit=10")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(got.DeadLetters) != 2 || got.DeadLetters[0].Event.ID != "bad1" || got.DeadLetters[1].Event.ID != "bad2" ||
		!strings.Contains(got.DeadLetters[0].Reason, `rule "views" counter`) || got.DeadLetters[0].Source != "http" {
		t.Fatalf("after a restart GET /events/dead: %d %+v", resp.StatusCode, got)
	}
	if v := getValue(t, p.addr, "views:p1"); v != 1 {
		t.Fatalf("views:p1 = %d, want 1", v)
	}
	if resp, err := client.Get(p.addr + "/events/dead?limit=0"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("limit=0: %v %v", resp.Status, err)
	}
}
