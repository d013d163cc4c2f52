package main

// Stream outages with a real counterd process and a real nats-server with
// JetStream (natstest.Server, stopped and started again on the same port
// and store): down at start, counterd serves counters and begins
// consuming once the stream is up; down mid-run, POST /events answers 503
// stream_unavailable instead of waiting, /readyz names the failing check,
// and every event still counts once.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/natstest"
)

const outageRules = `rules:
  - name: views
    filter: event.type == "view"
    counter: '"views:" + event.post'
    add: "1"
`

// streamCheck is GET /readyz's answer and its "stream" check.
type streamCheck struct {
	status int
	Status string
	Checks struct {
		Stream struct {
			Stream, State, Error string
			OK                   bool
		}
	}
}

func readyz(t *testing.T, base, query string) streamCheck {
	t.Helper()
	resp, err := client.Get(base + "/readyz" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c streamCheck
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	c.status = resp.StatusCode
	return c
}

// viewBatch returns events from..to-1 of 5 posts and adds them to truth.
func viewBatch(from, to int, truth map[string]int64) []byte {
	var b []byte
	for i := from; i < to; i++ {
		post := fmt.Sprintf("p%d", i%5)
		b = fmt.Appendf(b, `{"id":"v-%d","type":"view","ts":%d,"post":%q}`+"\n", i, time.Now().UnixMilli(), post)
		if truth != nil {
			truth[post]++
		}
	}
	return b
}

// postBatch posts b and returns the status, the error code and how long
// the answer took.
func postBatch(t *testing.T, base string, b []byte) (int, string, time.Duration) {
	t.Helper()
	t0 := time.Now()
	resp, err := client.Post(base+"/events", "application/x-ndjson", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m struct{ Error struct{ Code string } }
	json.Unmarshal(body, &m)
	return resp.StatusCode, m.Error.Code, time.Since(t0)
}

func expectStreamUnavailable(t *testing.T, base string, b []byte) {
	t.Helper()
	status, code, took := postBatch(t, base, b)
	if status != http.StatusServiceUnavailable || code != "stream_unavailable" {
		t.Fatalf("POST /events with the stream down: %d %q, want 503 stream_unavailable", status, code)
	}
	if took > 10*time.Second { // --events-timeout 1s, a generous margin
		t.Fatalf("POST /events with the stream down took %s", took)
	}
}

// TestPipelineStreamOutage: NATS is down when counterd starts, comes up,
// goes down mid-run and comes back.
func TestPipelineStreamOutage(t *testing.T) {
	srv := natstest.NewServer(t)
	srv.Stop()
	name := natstest.Name("T")
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(outageRules), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--nats", srv.URL, "--nats-stream", name, "--nats-subject", name + ".events",
		"--nats-dead-subject", name + ".dead", "--nats-consumer", name, "--nats-ack-wait", "3s",
		"--rules", rulesPath, "--events-timeout", "1s"}

	// --events-fail-fast: the old behaviour, exit at start.
	cmd := exec.Command(counterdBin(t), append([]string{"--data", t.TempDir(), "--http", "127.0.0.1:0", "--resp", "", "--grpc", "",
		"--events-fail-fast"}, args...)...)
	out, err := runWithin(cmd, 60*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(out, "unavailable") {
		t.Fatalf("--events-fail-fast with the stream down: %v\n%s", err, out)
	}

	p := start(t, t.TempDir(), args...)
	// Everything but events works; the stream check says why not.
	if code, _, _, err := post(p.addr+"/counters/hits/increment", "", `{"delta": 3}`); err != nil || code != 200 {
		t.Fatalf("increment with the stream down: %d %v", code, err)
	}
	if v := getValue(t, p.addr, "hits"); v != 3 {
		t.Fatalf("hits = %d", v)
	}
	c := readyz(t, p.addr, "")
	if c.status != 200 || c.Checks.Stream.OK || c.Checks.Stream.State != "connecting" || c.Checks.Stream.Error == "" ||
		c.Checks.Stream.Stream != "nats:"+name {
		t.Fatalf("GET /readyz with the stream down at start: %+v", c)
	}
	if c := readyz(t, p.addr, "?for=events"); c.status != 503 {
		t.Fatalf("GET /readyz?for=events with the stream down: %+v", c)
	}
	truth := map[string]int64{}
	expectStreamUnavailable(t, p.addr, viewBatch(0, 100, nil))

	srv.Start()
	if err := poll(60*time.Second, func() error {
		if c := readyz(t, p.addr, "?for=events"); c.status != 200 || !c.Checks.Stream.OK || c.Checks.Stream.State != "connected" {
			return fmt.Errorf("stream check after the stream came up: %+v", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := postBatch(t, p.addr, viewBatch(0, 300, truth)); status != http.StatusAccepted {
		t.Fatalf("POST /events once the stream is up: %d %s", status, code)
	}
	checkViews := func() {
		t.Helper()
		if err := poll(60*time.Second, func() error {
			for post, n := range truth {
				if v := getValue(t, p.addr, "views:"+post); v != n {
					return fmt.Errorf("views:%s = %d, want %d", post, v, n)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	checkViews()

	// Mid-run outage.
	srv.Stop()
	during := viewBatch(300, 600, nil)
	expectStreamUnavailable(t, p.addr, during)
	if err := poll(30*time.Second, func() error {
		if c := readyz(t, p.addr, ""); c.status != 200 || c.Checks.Stream.OK || c.Checks.Stream.State != "unreachable" {
			return fmt.Errorf("stream check during the outage: %+v", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	expectStreamUnavailable(t, p.addr, during)
	if code, _, _, err := post(p.addr+"/counters/hits/increment", "", `{"delta": 1}`); err != nil || code != 200 {
		t.Fatalf("increment during the outage: %d %v", code, err)
	}
	if !strings.Contains(metrics(t, p.addr), "counterd_pipeline_stream_up 0") {
		t.Fatal("counterd_pipeline_stream_up is not 0 during the outage")
	}
	srv.Start()
	viewBatch(300, 600, truth) // the batch refused during the outage, sent again
	for _, b := range [][]byte{during, viewBatch(600, 900, truth)} {
		if err := poll(60*time.Second, func() error {
			if status, code, _ := postBatch(t, p.addr, b); status != http.StatusAccepted {
				return fmt.Errorf("POST /events after the outage: %d %s", status, code)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	checkViews()
	time.Sleep(time.Second) // a late duplicate would show now
	checkViews()
	if c := readyz(t, p.addr, ""); !c.Checks.Stream.OK {
		t.Fatalf("stream check after the outage: %+v", c)
	}
	if !strings.Contains(metrics(t, p.addr), "counterd_pipeline_stream_up 1") {
		t.Fatal("counterd_pipeline_stream_up is not 1 after the outage")
	}
	logs := p.logs()
	for msg, want := range map[string]int{
		`msg="pipeline: stream unreachable at start`: 1,
		`msg="pipeline: stream connected"`:           1,
		`msg="pipeline: stream unreachable:`:         1,
		`msg="pipeline: stream reachable again"`:     1,
	} {
		if n := strings.Count(logs, msg); n != want {
			t.Errorf("%d log lines %s, want %d", n, msg, want)
		}
	}
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// runWithin runs cmd and returns its output, killing it after d.
func runWithin(cmd *exec.Cmd, d time.Duration) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("still running after %s", d)
	}
}
