// Package buildinfo holds the version counterd and counterctl report.
//
// Release builds stamp it with the linker:
//
//	go build -ldflags "-X github.com/counterd/counterd/internal/buildinfo.version=v1.2.3" ./cmd/counterd
//
// (make build does this with the output of git describe). A binary built
// with "go install github.com/counterd/counterd/cmd/counterd@v1.2.3"
// reports its module version instead, and any other build "devel" plus
// the VCS revision when Go recorded one.
package buildinfo

import "runtime/debug"

// version is set by -ldflags -X; empty means "work it out".
var version string

// Version returns the version of the running binary.
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo picks the version from the build information Go embeds:
// the main module's version for go install mod@version, else "devel"
// with the VCS revision (and "-dirty") when recorded.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}
