package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdclient "github.com/counterd/counterd/client"
	"github.com/counterd/counterd/internal/testutil/ports"
)

// TestClusterScript runs scripts/cluster.sh as the README shows it: the
// watching mode keeps the other nodes running when one is killed, and
// kill / status / start / stop act on one node; Ctrl-C stops them all.
func TestClusterScript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scripts/cluster.sh with counterd processes")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("scripts/cluster.sh needs curl")
	}
	off := scriptPortOffset(t, 3)
	dir := t.TempDir()
	env := append(os.Environ(), "CLUSTER_DIR="+dir, "COUNTERD_BIN="+counterdBin(t), "CLUSTER_PORT_OFFSET="+strconv.Itoa(off))
	script := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("../../scripts/cluster.sh", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cluster.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var watchOut syncBuf
	watch := exec.Command("../../scripts/cluster.sh", "3")
	watch.Env = env
	watch.Stdout, watch.Stderr = &watchOut, &watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	watched := make(chan error, 1)
	go func() { watched <- watch.Wait() }()
	t.Cleanup(func() {
		_ = watch.Process.Kill()
		cmd := exec.Command("../../scripts/cluster.sh", "down")
		cmd.Env = env
		_ = cmd.Run()
		if t.Failed() {
			t.Logf("cluster.sh 3 output:\n%s", watchOut.String())
			for i := 1; i <= 3; i++ {
				b, _ := os.ReadFile(fmt.Sprintf("%s/n%d.log", dir, i))
				t.Logf("n%d.log (tail):\n%s", i, tail(string(b), 15))
			}
		}
	})
	if err := poll(60*time.Second, func() error {
		if !strings.Contains(watchOut.String(), "watching") {
			return fmt.Errorf("not watching yet:\n%s", watchOut.String())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	url := func(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 8180+i+off) }
	nodes := map[int]*cdclient.Client{}
	for i := 1; i <= 3; i++ {
		c, err := cdclient.New(url(i), cdclient.WithRetries(0), cdclient.WithTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = c
	}
	ctx := context.Background()
	if _, err := nodes[1].Incr(ctx, "page_views:home", 5, cdclient.WithDurability("sync")); err != nil {
		t.Fatal(err)
	}

	if out := script("kill", "1"); !strings.Contains(out, "n1 stopped (KILL)") {
		t.Fatalf("kill 1: %s", out)
	}
	for _, i := range []int{2, 3} { // reads of n1's ids fall back at once
		if v, err := nodes[i].Get(ctx, "page_views:home"); err != nil || v.Value != 5 {
			t.Fatalf("read through n%d with n1 killed: %+v %v", i, v, err)
		}
	}
	// Failover: writes through the survivors succeed once n1 is declared
	// dead.
	if err := poll(30*time.Second, func() error {
		_, err := nodes[2].Incr(ctx, "page_views:home", 1, cdclient.WithDurability("sync"))
		return err
	}); err != nil {
		t.Fatalf("no write through n2 after n1 was killed: %v", err)
	}
	if err := poll(10*time.Second, func() error {
		if !strings.Contains(watchOut.String(), "n1 is not running") {
			return fmt.Errorf("the watcher did not report n1")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := script("status")
	for _, want := range []string{"n1 ", "stopped", "n2 ", "n3 "} {
		if !strings.Contains(st, want) {
			t.Fatalf("status lacks %q:\n%s", want, st)
		}
	}
	if strings.Count(st, "ready") != 2 || strings.Contains(st, "not ready") {
		t.Fatalf("status: want n2 and n3 ready:\n%s", st)
	}

	if out := script("start", "1"); !strings.Contains(out, "n1: http://") {
		t.Fatalf("start 1: %s", out)
	}
	if v, err := nodes[1].Get(ctx, "page_views:home"); err != nil || v.Value != 6 {
		t.Fatalf("read through the restarted n1: %+v %v", v, err)
	}
	if out := script("stop", "3"); !strings.Contains(out, "n3 stopped (TERM)") {
		t.Fatalf("stop 3: %s", out)
	}
	if v, err := nodes[1].Get(ctx, "page_views:home"); err != nil || v.Value != 6 {
		t.Fatalf("read after n3 left: %+v %v", v, err)
	}
	if exited := func() bool {
		select {
		case <-watched:
			return true
		default:
			return false
		}
	}(); exited {
		t.Fatalf("the watcher exited when nodes stopped:\n%s", watchOut.String())
	}

	// Ctrl-C stops every node.
	_ = watch.Process.Signal(syscall.SIGINT)
	select {
	case <-watched:
	case <-time.After(60 * time.Second):
		t.Fatalf("the watcher did not stop on SIGINT:\n%s", watchOut.String())
	}
	if st := script("status"); strings.Contains(st, "running") {
		t.Fatalf("nodes still running after Ctrl-C:\n%s", st)
	}
}

// scriptPortOffset picks a CLUSTER_PORT_OFFSET under which the ports of n
// nodes are free, below the kernel's ephemeral range.
func scriptPortOffset(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 200; try++ {
		off := 1000 + 10*rand.IntN(2000)
		var ps []int
		for i := 1; i <= n; i++ {
			for _, base := range []int{8180, 6380, 9190, 7940} {
				ps = append(ps, base+i+off)
			}
		}
		if ports.Claim(ps...) {
			return off
		}
	}
	t.Fatal("no free port range for scripts/cluster.sh")
	return 0
}

// syncBuf is a bytes.Buffer safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
