package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// respCmd sends one command and returns the first line of the reply (and,
// for a bulk string, its payload line).
func respCmd(t *testing.T, conn net.Conn, rd *bufio.Reader, args ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "$") && line != "$-1" {
		payload, _ := rd.ReadString('\n')
		return strings.TrimSpace(payload)
	}
	return line
}

// TestFrontEndsShareCounters: a write over the Redis protocol is read over
// HTTP and the reverse, on the real binary.
func TestFrontEndsShareCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	port := freePort(t)
	p := start(t, filepath.Join(t.TempDir(), "data"), "--resp", "127.0.0.1:"+port)
	conn, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)

	if got := respCmd(t, conn, rd, "INCRBY", "page_views:article_123", "41"); got != ":41" {
		t.Fatalf("INCRBY: %q", got)
	}
	if v := getValue(t, p.addr, "page_views:article_123"); v != 41 {
		t.Fatalf("HTTP reads %d after RESP INCRBY 41", v)
	}
	if code, _, _, err := post(p.addr+"/counters/page_views:article_123/increment", "", `{"delta": 1}`); err != nil || code != 200 {
		t.Fatalf("HTTP increment: %d %v", code, err)
	}
	if got := respCmd(t, conn, rd, "GET", "page_views:article_123"); got != "42" {
		t.Fatalf("RESP GET after HTTP increment: %q, want 42", got)
	}
	if code, _, _, err := post(p.addr+"/counters/counter:article_123/hincr", "", `{"fields": {"views": 3}}`); err != nil || code != 200 {
		t.Fatalf("HTTP hincr: %d %v", code, err)
	}
	if got := respCmd(t, conn, rd, "HINCRBY", "counter:article_123", "views", "1"); got != ":4" {
		t.Fatalf("RESP HINCRBY after HTTP hincr: %q, want :4", got)
	}
	if got := respCmd(t, conn, rd, "PFADD", "visitors:a", "u1", "u2"); got != ":1" {
		t.Fatalf("PFADD: %q", got)
	}
	resp, err := client.Get(p.addr + "/counters/visitors:a/pfcount")
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Value int64 }
	decodeJSON(t, resp, &m)
	if m.Value != 2 {
		t.Fatalf("HTTP pfcount after RESP PFADD: %d, want 2", m.Value)
	}
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
