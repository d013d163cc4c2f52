//go:build linux

package netns

import (
	"net"
	"os/exec"
	"strings"
	"testing"
)

// dial connects from node i's namespace to addr with bash's /dev/tcp and
// returns what bash printed ("" when the connection opened).
func dial(t *testing.T, nw *Network, i int, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, _ := nw.Command(i, "bash", "-c", "exec 3<>/dev/tcp/"+host+"/"+port).CombinedOutput()
	return string(out)
}

// TestPartitionRoutes: nodes reach each other and the host; a partition
// makes connections between the groups fail with "Permission denied" (the
// prohibit route) but leaves the host reachable; Heal restores the paths.
func TestPartitionRoutes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	nw := New(t, 3)
	ln, err := net.Listen("tcp", nw.HostIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	peer := nw.IP(1) + ":9" // nothing listens: "refused" proves the path works
	reach := func(stage string) {
		t.Helper()
		if out := dial(t, nw, 0, peer); !strings.Contains(out, "refused") {
			t.Fatalf("%s: node 0 -> node 1: %q, want connection refused", stage, out)
		}
		if out := dial(t, nw, 2, ln.Addr().String()); out != "" {
			t.Fatalf("%s: node 2 -> host: %q", stage, out)
		}
	}
	reach("before partition")
	if err := nw.Partition([]int{2}, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	if out := dial(t, nw, 2, nw.IP(0)+":9"); !strings.Contains(out, "ermission denied") {
		t.Fatalf("partitioned node 2 -> node 0: %q, want permission denied", out)
	}
	if out := dial(t, nw, 1, nw.IP(2)+":9"); !strings.Contains(out, "ermission denied") {
		t.Fatalf("node 1 -> partitioned node 2: %q, want permission denied", out)
	}
	reach("during partition")
	if err := nw.Heal(); err != nil {
		t.Fatal(err)
	}
	reach("after heal")
	if out := dial(t, nw, 2, nw.IP(0)+":9"); !strings.Contains(out, "refused") {
		t.Fatalf("after heal node 2 -> node 0: %q, want connection refused", out)
	}
}
