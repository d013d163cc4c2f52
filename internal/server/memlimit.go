package server

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/counterd/counterd/internal/engine"
)

// The memory budget (--memory-limit; docs/operations.md, "Memory").
//
// A limit feeds two things: the Go runtime's soft memory limit
// (debug.SetMemoryLimit), so the collector works harder as the heap nears
// it instead of letting garbage grow the heap to twice the live data
// (GOGC's default), and the engine's memtable size, a thirty-second of the
// limit within engine.MinMemTableSize..32 MiB, since up to two memtables
// are held under a write load. The runtime gets runtimeShare of a limit
// given by flag: the rest is for what the runtime does not manage (the
// binary's text, thread stacks outside Go), so the process's RSS stays
// under the flag's value. Everything counterd holds, Pebble's
// memtables and block cache included, is Go memory in the release build
// (CGO_ENABLED=0), so the soft limit bounds the process's RSS up to the
// runtime's own overhead. It is soft: live data beyond it is kept, never
// dropped (a counter service does not evict), and the collector then runs
// more often.

// cgroupShare is the part of a cgroup's memory limit the auto setting
// gives the Go runtime: the rest is headroom for the kernel's accounting
// of what the runtime does not see (page cache of the data directory,
// thread stacks outside Go, the binary's text).
const cgroupShare = 0.9

// runtimeShare is the part of a --memory-limit size the Go runtime's soft
// limit gets (the RSS measured with a 384 MiB limit was the runtime's limit
// plus about 5 MB).
const runtimeShare = 0.95

// memBudget is a resolved --memory-limit.
type memBudget struct {
	limit    uint64 // bytes; 0: none
	runtime  uint64 // the Go runtime's soft limit (0: left alone)
	source   string // "flag", "cgroup", "GOMEMLIMIT" or "none"
	memTable uint64 // the engine's memtable size; 0: the engine's default
}

// parseMemoryLimit parses --memory-limit: "auto", "none" (or 0), or a
// size (parseByteSize). It returns 0 for none and ok=false for auto.
func parseMemoryLimit(s string) (limit uint64, auto bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return 0, true, nil
	case "none":
		return 0, false, nil
	}
	n, err := parseByteSize(s)
	if err != nil {
		return 0, false, err
	}
	if n != 0 && n < minMemoryLimit {
		return 0, false, fmt.Errorf("%q is below the smallest limit, %d MiB", s, minMemoryLimit>>20)
	}
	if n > math.MaxInt64 {
		return 0, false, fmt.Errorf("%q is too large", s)
	}
	return n, false, nil
}

// minMemoryLimit is the smallest --memory-limit: below it the collector
// would run without pause on an empty node.
const minMemoryLimit = 64 << 20

// resolveMemoryLimit turns --memory-limit into a budget. For auto it uses,
// in order, a GOMEMLIMIT the process was started with (left as it is), a
// share of the memory limit of the cgroup counterd runs in (read under
// cgroupRoot, normally /sys/fs/cgroup, from procCgroup, normally
// /proc/self/cgroup), or none.
func resolveMemoryLimit(s, procCgroup, cgroupRoot string) (memBudget, error) {
	n, auto, err := parseMemoryLimit(s)
	if err != nil {
		return memBudget{}, err
	}
	b := memBudget{limit: n, source: "flag"}
	switch {
	case !auto && n == 0:
		b.source = "none"
	case auto && os.Getenv("GOMEMLIMIT") != "":
		if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
			b.limit, b.source = uint64(l), "GOMEMLIMIT"
		} else {
			b.source = "none"
		}
	case auto:
		if c, ok := cgroupMemoryLimit(procCgroup, cgroupRoot); ok {
			b.limit, b.source = uint64(float64(c)*cgroupShare), "cgroup"
		} else {
			b.source = "none"
		}
	}
	switch b.source {
	case "flag":
		b.runtime = uint64(float64(b.limit) * runtimeShare)
	case "cgroup":
		b.runtime = b.limit // already a share of the cgroup's
	}
	if b.limit > 0 {
		b.memTable = min(max(b.limit/32, engine.MinMemTableSize), engine.DefaultMemTableSize)
	}
	return b, nil
}

// apply sets the runtime's soft limit (unless it came from GOMEMLIMIT,
// which the runtime already applied) and logs the budget.
func (b memBudget) apply(log *slog.Logger) {
	if b.runtime > 0 {
		debug.SetMemoryLimit(int64(b.runtime))
	}
	if b.limit == 0 {
		log.Info("memory limit", "limit", "none")
		return
	}
	log.Info("memory limit", "limit_bytes", b.limit, "source", b.source, "runtime_limit_bytes", debug.SetMemoryLimit(-1), "memtable_bytes", b.memTable)
}

// cgroupMemoryLimit is the smallest memory limit on the path of the
// process's cgroup, v2 (memory.max) or v1 (memory.limit_in_bytes), read
// under root; ok is false when there is none (or nothing is readable).
func cgroupMemoryLimit(procCgroup, root string) (limit uint64, ok bool) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
			if n, found := readLimitFile(filepath.Join(dir, filepath.FromSlash(p), file)); found && (!ok || n < limit) {
				limit, ok = n, true
			}
			if p == "/" {
				break
			}
		}
	}
	return limit, ok
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// cgroupUnlimited: cgroup v1 reports no limit as a huge number (the
// largest page-aligned int64); anything this large is no limit.
const cgroupUnlimited = 1 << 62

// readLimitFile reads a memory.max or memory.limit_in_bytes file: "max"
// or a huge number is no limit (found false).
func readLimitFile(name string) (uint64, bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n >= cgroupUnlimited {
		return 0, false
	}
	return n, true
}
