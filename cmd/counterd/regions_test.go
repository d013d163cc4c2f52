package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegionSnapshotRestore runs the real binaries: a node of region eu
// reports its region and peers on GET /regions; counterctl snapshots it to
// a directory; the data directory refuses to start as another region; and
// a new node over an empty data directory restored from the snapshot reads
// every value the first one had.
func TestRegionSnapshotRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd and counterctl binaries")
	}
	data := filepath.Join(t.TempDir(), "data")
	p := start(t, data, "--region", "eu", "--peer-regions", "us=127.0.0.1:9999,DC_ASIA_0=127.0.0.1:9998", "--node-id", "eu-1", "--grpc", "127.0.0.1:0")

	resp, err := client.Get(p.addr + "/regions")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Region string
		Node   string
		Peers  []struct{ Name, Addr string }
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Region != "eu" || st.Node != "eu-1" || len(st.Peers) != 2 || st.Peers[1].Name != "DC_ASIA_0" {
		t.Fatalf("GET /regions: %+v %v", st, err)
	}

	want := map[string]int64{}
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("page_views:%d", i)
		if code, _, _, err := post(p.addr+"/counters/"+id+"/increment", "", fmt.Sprintf(`{"delta":%d}`, i+1)); err != nil || code != 200 {
			t.Fatalf("increment %s: %d %v", id, code, err)
		}
		want[id] = int64(i + 1)
	}
	snap := t.TempDir()
	ctl := func(addr string, args ...string) string {
		t.Helper()
		out, err := exec.Command(counterctlBin(t), append([]string{"--addr", addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("counterctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := ctl(p.addr, "snapshot", snap); !strings.Contains(out, ": 200 counters") {
		t.Fatalf("snapshot: %s", out)
	}
	p.term(t)

	// The data directory is eu's.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, counterdBin(t), "--data", data, "--http", "127.0.0.1:0", "--resp", "", "--grpc", "", "--region", "us").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "belongs to another region") {
		t.Fatalf("restart as region us: %v\n%s", err, out)
	}

	q := start(t, filepath.Join(t.TempDir(), "empty"), "--region", "eu", "--node-id", "eu-2")
	if out := ctl(q.addr, "restore", snap); !strings.HasPrefix(out, "restored 200 counters") {
		t.Fatalf("restore: %s", out)
	}
	for id, v := range want {
		if got := getValue(t, q.addr, id); got != v {
			t.Fatalf("%s on the restored node: %d, want %d", id, got, v)
		}
	}
}
