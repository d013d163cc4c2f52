package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, c := range []struct {
		main     string
		settings map[string]string
		want     string
	}{
		{"v1.2.3", nil, "v1.2.3"}, // go install ...@v1.2.3
		{"(devel)", map[string]string{"vcs.revision": "0123456789abcdef0123", "vcs.modified": "false"}, "devel-0123456789ab"},
		{"(devel)", map[string]string{"vcs.revision": "abc", "vcs.modified": "true"}, "devel-abc-dirty"},
		{"", nil, "devel"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: c.main}}
		for k, v := range c.settings {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		if got := fromBuildInfo(bi); got != c.want {
			t.Errorf("main %q settings %v: %q, want %q", c.main, c.settings, got, c.want)
		}
	}
	version = "v9.9.9"
	defer func() { version = "" }()
	if Version() != "v9.9.9" {
		t.Errorf("stamped: %q", Version())
	}
}
