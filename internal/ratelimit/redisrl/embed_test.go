package redisrl

import (
	"os"
	"testing"
)

// TestCheckLuaGzipCurrent: the embedded check.lua.gz is check.lua,
// compressed; run go generate ./internal/ratelimit/redisrl after editing
// the script.
func TestCheckLuaGzipCurrent(t *testing.T) {
	src, err := os.ReadFile("check.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(src) == 0 || checkLua != string(src) {
		t.Fatal("check.lua.gz is not check.lua: run go generate ./internal/ratelimit/redisrl")
	}
}
