package server

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/engine"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"0": 0, "1048576": 1 << 20, "128MiB": 128 << 20, "128mb": 128 << 20, "64m": 64 << 20,
		"1GiB": 1 << 30, " 2 GB ": 2 << 30, "10k": 10 << 10, "7B": 7, "1TiB": 1 << 40,
	} {
		got, err := parseByteSize(in)
		if err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if got, err := parseMinFreeDisk("auto"); err != nil || got != engine.MinFreeDiskAuto {
		t.Errorf("parseMinFreeDisk(auto) = %d, %v", got, err)
	}
	if got, err := parseMinFreeDisk("64MiB"); err != nil || got != 64<<20 {
		t.Errorf("parseMinFreeDisk(64MiB) = %d, %v", got, err)
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "12 parsecs", "99999999999999999999", "17179869184GiB", "1e9"} {
		if got, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// Property: a number with any unit parses to the number times the unit,
// or fails for overflow; nothing else parses wrong or panics.
func TestParseByteSizeProperty(t *testing.T) {
	units := map[string]uint{"": 0, "B": 0, "k": 10, "KB": 10, "KiB": 10, "m": 20, "MB": 20, "MiB": 20, "G": 30, "gb": 30, "GiB": 30, "T": 40, "TiB": 40}
	names := make([]string, 0, len(units))
	for u := range units {
		names = append(names, u)
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Uint64().Draw(t, "n")
		u := rapid.SampledFrom(names).Draw(t, "unit")
		got, err := parseByteSize(fmt.Sprint(n, u))
		shift := units[u]
		if n > (1<<64-1)>>shift {
			if err == nil {
				t.Fatalf("%d%s overflows, parsed as %d", n, u, got)
			}
			return
		}
		if err != nil || got != n<<shift {
			t.Fatalf("%d%s = %d, %v; want %d", n, u, got, err, n<<shift)
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		_, _ = parseByteSize(s) // never panics
	})
}
