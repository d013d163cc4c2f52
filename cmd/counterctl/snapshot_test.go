package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/engine"
)

// startSnapshotServer serves the HTTP API and the snapshot routes (as an
// embedded counterd does) over an engine in a fresh data directory.
func startSnapshotServer(t *testing.T, node string) (string, *engine.Engine) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.NodeID = node
	cfg.Logger = slog.New(slog.DiscardHandler)
	eng, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(engine.Local(eng), httpapi.Options{Logger: slog.New(slog.DiscardHandler)})
	snap := chunksync.NewHandler(eng, chunksync.Options{ChunkKeys: 4, RangeChunks: 4})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/admin/snapshot/") {
			snap.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return srv.URL, eng
}

func TestSnapshotAndRestore(t *testing.T) {
	src, _ := startSnapshotServer(t, "src")
	for i := 0; i < 60; i++ {
		ok(t, src, "incr", fmt.Sprintf("views:%03d", i), fmt.Sprint(i+1))
	}
	ok(t, src, "pfadd", "uniq:a", "x", "y", "z")
	ok(t, src, "hincr", "h:a", "f1=3", "f2=-4")
	dir := t.TempDir()

	var first snapshotReport
	if err := json.Unmarshal([]byte(ok(t, src, "--json", "snapshot", dir, "--no-progress")), &first); err != nil {
		t.Fatal(err)
	}
	if first.Counters != 62 || first.ChunksNew == 0 || first.ChunksNew != first.ChunksCompared || first.BytesWritten <= first.FullBytes {
		t.Fatalf("first snapshot: %+v", first)
	}

	ok(t, src, "incr", "views:030", "5")
	var second snapshotReport
	if err := json.Unmarshal([]byte(ok(t, src, "--json", "snapshot", dir, "--no-progress")), &second); err != nil {
		t.Fatal(err)
	}
	if second.ChunksNew != 1 || second.RangesNew != 1 || second.BytesWritten >= first.BytesWritten/4 {
		t.Fatalf("second snapshot after one change: %+v (first %+v)", second, first)
	}
	wantMatch(t, ok(t, src, "snapshot", dir, "--no-progress"), `(?m)^chunks: 0 new, 0 reused in changed ranges; ranges: 0 new, \d+ reused$`)

	dst, _ := startSnapshotServer(t, "dst")
	wantOut(t, ok(t, dst, "restore", dir, "--no-progress"), "restored 62 counters from "+fmt.Sprint(first.ChunksNew)+" chunks; 62 changed the node\n")
	for _, args := range [][]string{{"get", "views:030"}, {"get", "views:059"}, {"pfcount", "uniq:a"}, {"hgetall", "h:a"}} {
		a, b := ok(t, src, args...), ok(t, dst, args...)
		if a != b {
			t.Fatalf("%v: source %q, restored %q", args, a, b)
		}
	}
	wantMatch(t, ok(t, dst, "get", "views:030"), `^views:030  36  `)
	// Restoring again changes nothing.
	wantMatch(t, ok(t, dst, "restore", dir, "--no-progress"), `; 0 changed the node\n$`)
}

func TestRestoreBadInput(t *testing.T) {
	src, _ := startSnapshotServer(t, "src")
	ok(t, src, "incr", "views:a", "7")
	dir := t.TempDir()
	ok(t, src, "snapshot", dir, "--no-progress")
	dst, eng := startSnapshotServer(t, "dst")

	// A chunk whose bytes no longer match its name is refused before any
	// of it reaches the node.
	blobs, _ := filepath.Glob(filepath.Join(dir, "blobs", "*", "*"))
	for _, p := range blobs {
		b, _ := os.ReadFile(p)
		if strings.HasPrefix(string(b), "CSC1") {
			b[len(b)-1] ^= 1
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, _, errOut := ctl(t, dst, "restore", dir, "--no-progress")
	if code != 1 || !strings.Contains(errOut, "corrupt blob") || eng.Len() != 0 {
		t.Fatalf("corrupt snapshot: exit %d, stderr %q, %d counters on the node", code, errOut, eng.Len())
	}
	if code, _, errOut := ctl(t, dst, "restore", t.TempDir()); code != 1 || !strings.Contains(errOut, "no snapshot") {
		t.Fatalf("empty dir: exit %d, stderr %q", code, errOut)
	}

	// Garbage posted as a chunk gets a typed 400 and stores nothing.
	resp, err := http.Post(dst+"/admin/snapshot/chunks", "application/octet-stream", strings.NewReader("CSC1\x05garbage"))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "invalid_argument" || eng.Len() != 0 {
		t.Fatalf("garbage chunk: %d %+v, %d counters", resp.StatusCode, body, eng.Len())
	}
	// An unknown or malformed blob name is a typed 404 or 400.
	for path, want := range map[string]int{
		"/admin/snapshot/blobs/" + strings.Repeat("ab", 32): http.StatusNotFound,
		"/admin/snapshot/blobs/xyz":                         http.StatusBadRequest,
		"/admin/snapshot/nothing":                           http.StatusNotFound,
	} {
		resp, err := http.Get(dst + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
