package server

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/counterd/counterd/internal/engine"
)

// parseMinFreeDisk parses --min-free-disk: "auto" (the engine's default:
// 128 MiB, or a tenth of the filesystem if smaller) or a size.
func parseMinFreeDisk(s string) (uint64, error) {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		return engine.MinFreeDiskAuto, nil
	}
	return parseByteSize(s)
}

// parseByteSize parses a size such as 128MiB, 1GB, 64m or 1048576 (bytes):
// a non-negative integer with an optional unit, B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB or T/TB/TiB, case-insensitive; the units are powers of 1024
// (KB = KiB), as for memory sizes.
func parseByteSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a size (a number of bytes, or with a unit: 128MiB, 1GiB)", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %v", s, err)
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	default:
		return 0, fmt.Errorf("%q: unknown unit %q (B, KiB, MiB, GiB or TiB)", s, t[i:])
	}
	if n > (1<<64-1)>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << shift, nil
}
