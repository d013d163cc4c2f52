package server

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/engine"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]struct {
		n    uint64
		auto bool
	}{
		"auto": {0, true}, "AUTO": {0, true}, "": {0, true}, "none": {0, false}, "0": {0, false},
		"512MiB": {512 << 20, false}, "4GiB": {4 << 30, false}, "64m": {64 << 20, false},
	} {
		n, auto, err := parseMemoryLimit(in)
		if err != nil || n != want.n || auto != want.auto {
			t.Errorf("parseMemoryLimit(%q) = %d, %v, %v; want %d, %v", in, n, auto, err, want.n, want.auto)
		}
	}
	for _, in := range []string{"1MiB", "63MiB", "lots", "-1GiB", "1.5GiB", "16EiB", "17179869183GiB"} {
		if n, _, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, n)
		}
	}
}

// Property: any accepted limit is none, auto or at least minMemoryLimit,
// and fits an int64 (debug.SetMemoryLimit's type); nothing panics.
func TestParseMemoryLimitProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.String(),
			rapid.Map(rapid.Uint64(), func(n uint64) string { return fmt.Sprint(n) }),
			rapid.Map(rapid.Uint64Range(0, 1<<40), func(n uint64) string { return fmt.Sprint(n, "MiB") }),
		).Draw(t, "s")
		n, auto, err := parseMemoryLimit(s)
		if err != nil {
			return
		}
		if auto && n != 0 {
			t.Fatalf("%q: auto with a limit %d", s, n)
		}
		if n != 0 && (n < minMemoryLimit || n > math.MaxInt64) {
			t.Fatalf("%q accepted as %d", s, n)
		}
	})
}

func FuzzParseMemoryLimit(f *testing.F) {
	for _, s := range []string{"auto", "none", "0", "512MiB", "1TiB", "64m", "x", "99999999999999999999GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, auto, err := parseMemoryLimit(s)
		if err == nil && n != 0 && (auto || n < minMemoryLimit || n > math.MaxInt64) {
			t.Fatalf("%q accepted as %d (auto %v)", s, n, auto)
		}
	})
}

// writeCgroupFile writes name (and its directories) under dir.
func writeCgroupFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The cgroup limit is the smallest on the process's cgroup path, in
// cgroup v2 and v1 layouts; "max" and v1's huge number are no limit.
func TestCgroupMemoryLimit(t *testing.T) {
	cases := []struct {
		name   string
		proc   string
		files  map[string]string
		want   uint64
		wantOK bool
	}{
		{"v2 own limit", "0::/system.slice/counterd.service\n",
			map[string]string{"system.slice/counterd.service/memory.max": "1073741824\n", "system.slice/memory.max": "max\n"}, 1 << 30, true},
		{"v2 parent is smaller", "0::/a/b\n",
			map[string]string{"a/b/memory.max": "max\n", "a/memory.max": "536870912\n"}, 512 << 20, true},
		{"v2 namespace root", "0::/\n", map[string]string{"memory.max": "268435456\n"}, 256 << 20, true},
		{"v2 no limit", "0::/x\n", map[string]string{"x/memory.max": "max\n", "memory.max": "max\n"}, 0, false},
		{"v1", "4:memory:/docker/abc\n3:cpu:/\n",
			map[string]string{"memory/docker/abc/memory.limit_in_bytes": "2147483648\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"}, 2 << 30, true},
		{"v1 unlimited", "4:memory:/process_api/e5\n",
			map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"v1 combined controllers", "7:cpu,memory:/k\n",
			map[string]string{"memory/k/memory.limit_in_bytes": "1048576000\n"}, 1048576000, true},
		{"garbage", "nonsense\n0::/\n", map[string]string{"memory.max": "lots\n"}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range c.files {
				writeCgroupFile(t, root, name, content)
			}
			proc := filepath.Join(t.TempDir(), "cgroup")
			writeCgroupFile(t, filepath.Dir(proc), "cgroup", c.proc)
			got, ok := cgroupMemoryLimit(proc, root)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("got %d, %v; want %d, %v", got, ok, c.want, c.wantOK)
			}
		})
	}
	if _, ok := cgroupMemoryLimit(filepath.Join(t.TempDir(), "missing"), "/nonexistent"); ok {
		t.Fatal("a missing /proc/self/cgroup gave a limit")
	}
}

// restoreMemoryLimit puts the runtime's soft limit back after a test.
func restoreMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

func TestResolveMemoryLimit(t *testing.T) {
	restoreMemoryLimit(t)
	t.Setenv("GOMEMLIMIT", "")
	root := t.TempDir()
	writeCgroupFile(t, root, "memory.max", "1073741824\n")
	proc := filepath.Join(t.TempDir(), "cgroup")
	writeCgroupFile(t, filepath.Dir(proc), "cgroup", "0::/\n")
	noCgroup := filepath.Join(t.TempDir(), "none")

	gib := float64(1 << 30)
	b, err := resolveMemoryLimit("auto", proc, root)
	if err != nil || b.source != "cgroup" || b.limit != uint64(gib*cgroupShare) || b.runtime != b.limit || b.memTable != b.limit/32 {
		t.Fatalf("auto under a 1 GiB cgroup: %+v, %v", b, err)
	}
	if b, err = resolveMemoryLimit("auto", noCgroup, root); err != nil || b.limit != 0 || b.source != "none" || b.memTable != 0 {
		t.Fatalf("auto without a cgroup: %+v, %v", b, err)
	}
	if b, err = resolveMemoryLimit("none", proc, root); err != nil || b.limit != 0 || b.source != "none" {
		t.Fatalf("none: %+v, %v", b, err)
	}
	// A flag wins over the cgroup; the memtable stays within the engine's bounds.
	if b, err = resolveMemoryLimit("64GiB", proc, root); err != nil || b.source != "flag" || b.limit != 64<<30 ||
		b.runtime != uint64(gib*64*runtimeShare) || b.memTable != engine.DefaultMemTableSize {
		t.Fatalf("64GiB: %+v, %v", b, err)
	}
	if b, err = resolveMemoryLimit("64MiB", proc, root); err != nil || b.memTable != engine.MinMemTableSize {
		t.Fatalf("64MiB: %+v, %v", b, err)
	}
	if _, err = resolveMemoryLimit("lots", proc, root); err == nil {
		t.Fatal("a bad limit resolved")
	}
	// A GOMEMLIMIT the process started with is kept for auto.
	debug.SetMemoryLimit(300 << 20)
	t.Setenv("GOMEMLIMIT", "300MiB")
	if b, err = resolveMemoryLimit("auto", proc, root); err != nil || b.source != "GOMEMLIMIT" || b.limit != 300<<20 || b.runtime != 0 {
		t.Fatalf("auto with GOMEMLIMIT: %+v, %v", b, err)
	}
}

// apply sets the runtime's soft limit from a flag or a cgroup, and leaves
// it alone for none.
func TestMemBudgetApply(t *testing.T) {
	restoreMemoryLimit(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	debug.SetMemoryLimit(math.MaxInt64)
	b, err := resolveMemoryLimit("512MiB", "/nonexistent", "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	b.apply(log)
	share := runtimeShare
	if got, want := debug.SetMemoryLimit(-1), int64(float64(512<<20)*share); got != want {
		t.Fatalf("soft limit %d after a 512 MiB budget, want %d", got, want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	memBudget{source: "none"}.apply(log)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("soft limit %d after no budget", got)
	}
}
