package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size (mount's syntax: 4m) on dir and
// unmounts it when the test ends (after the processes started later are
// killed: cleanups run last first). It skips the test where mounting is not
// allowed (not root, no CAP_SYS_ADMIN in a container).
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("full-disk test: mounting a tmpfs needs root; skipped")
	}
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("full-disk test: no mount command; skipped")
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("full-disk test: mounting a tmpfs is not allowed here (%v); skipped", err)
	}
	if err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		// A process killed by an earlier cleanup may still hold files.
		var err error
		for range 50 {
			if err = syscall.Unmount(dir, 0); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("unmount %s: %v", dir, err)
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
}

// httpAnswer is a write's HTTP status and error code ("" on success).
func httpWrite(t *testing.T, url, body string) (int, string) {
	t.Helper()
	code, m, _, err := post(url, "", body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	var ec string
	if e, ok := m["error"].(map[string]any); ok {
		ec, _ = e["code"].(string)
	}
	return code, ec
}

// TestFullDiskReadOnlyAndRecovers: counterd with --data on a small tmpfs and
// sync writes (PFADD and INCR over HTTP and the Redis protocol) fills it
// until writes are refused, 507 insufficient_storage and MISCONF, async ones
// too; the node stays up and serves reads, /readyz and the metric say why;
// once a filler file is deleted writes resume without a restart; after
// SIGKILL and a restart every acknowledged write is there.
func TestFullDiskReadOnlyAndRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	mnt := t.TempDir()
	mountTmpfs(t, mnt, "4m")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 1536<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mnt, "data")
	respAddr := "127.0.0.1:" + freePort(t)
	// The default --min-free-disk (auto): a tenth of this small filesystem.
	args := []string{"--durability", "sync", "--resp", respAddr}
	p := start(t, data, args...)
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)

	w := fillUntilRefused(t, p, conn, rd)
	ackedN, sentN, ackedItems := w.ackedN, w.sentN, w.ackedItems

	// Read-only: writes of every kind refused, async ones too.
	if code, ec := httpWrite(t, p.addr+"/counters/n/increment?durability=async", `{"delta": 1}`); code != http.StatusInsufficientStorage || ec != "insufficient_storage" {
		t.Fatalf("async increment while full: %d %s", code, ec)
	}
	if code, ec := httpWrite(t, p.addr+"/counters/h/hincr", `{"fields": {"a": 1}}`); code != http.StatusInsufficientStorage {
		t.Fatalf("hincr while full: %d %s", code, ec)
	}
	if got := respCmd(t, conn, rd, "PFADD", "visitors", "late"); !strings.HasPrefix(got, "-MISCONF ") {
		t.Fatalf("RESP PFADD while full: %q", got)
	}
	// Alive, and serving reads from memory.
	v := getValue(t, p.addr, "n")
	if v < ackedN || v > sentN {
		t.Fatalf("n reads %d while full, want between %d acknowledged and %d sent", v, ackedN, sentN)
	}
	if got := respCmd(t, conn, rd, "PFCOUNT", "visitors"); !strings.HasPrefix(got, ":") {
		t.Fatalf("PFCOUNT while full: %q", got)
	}
	if code, body := getBody(t, p.addr+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "insufficient_storage") || !strings.Contains(body, "free") {
		t.Fatalf("/readyz while full: %d %s", code, body)
	}
	if _, body := getBody(t, p.addr+"/metrics"); !strings.Contains(body, "counterd_storage_writable 0") {
		t.Fatalf("metrics while full lack counterd_storage_writable 0:\n%s", grepLines(body, "counterd_storage"))
	}

	// Space returns: writes resume by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, ec := httpWrite(t, p.addr+"/counters/n/increment", `{"delta": 1}`)
		sentN++
		if code == 200 {
			ackedN++
			break
		}
		if code != http.StatusInsufficientStorage || time.Now().After(deadline) {
			t.Fatalf("after freeing space: %d %s", code, ec)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 20 {
		if got := respCmd(t, conn, rd, "INCR", "n"); !strings.HasPrefix(got, ":") {
			t.Fatalf("INCR after space returned: %q", got)
		}
		ackedN++
		sentN++
		if code, ec := httpWrite(t, p.addr+"/counters/visitors/pfadd", fmt.Sprintf(`{"items": ["again%d"]}`, i)); code != 200 {
			t.Fatalf("PFADD after space returned: %d %s", code, ec)
		}
		ackedItems++
	}
	if code, body := getBody(t, p.addr+"/readyz"); code != 200 {
		t.Fatalf("/readyz after space returned: %d %s", code, body)
	}
	if _, body := getBody(t, p.addr+"/metrics"); !strings.Contains(body, "counterd_storage_writable 1") {
		t.Fatalf("metrics after space returned:\n%s", grepLines(body, "counterd_storage"))
	}
	logs := p.logs()
	if n, m := strings.Count(logs, "storage full"), strings.Count(logs, "storage writable again"); n != 1 || m != 1 {
		t.Fatalf("logged read-only %d and writable %d times, want once each", n, m)
	}
	if strings.Contains(logs, "panic") {
		t.Fatalf("counterd panicked:\n%s", logs)
	}

	// Every acknowledged write survives a crash.
	p.kill(t)
	p = start(t, data, args...)
	v = getValue(t, p.addr, "n")
	if v < ackedN || v > sentN {
		t.Fatalf("after restart n = %d, want between %d acknowledged and %d sent", v, ackedN, sentN)
	}
	_, body := getBody(t, p.addr+"/counters/visitors/pfcount")
	var count int64
	if _, err := fmt.Sscanf(body[strings.Index(body, `"value":`)+len(`"value":`):], "%d", &count); err != nil {
		t.Fatalf("pfcount answer %s: %v", body, err)
	}
	if count < ackedItems*98/100 {
		t.Fatalf("after restart PFCOUNT = %d, %d items were acknowledged", count, ackedItems)
	}
	p.kill(t) // before the tmpfs is unmounted
	t.Logf("after restart: n = %d (acknowledged %d, sent %d), PFCOUNT %d (acknowledged %d)", v, ackedN, sentN, count, ackedItems)
}

// TestFullDiskENOSPCRecovers is the case: --data on a 3 MB tmpfs and
// sync writes until the disk is full (it used to panic: "pebble: fatal
// commit error ... no space left on device"), here with no reserve
// (--min-free-disk 0): the flusher still commits nothing the filesystem
// has no room for, so the node refuses writes instead, stays up serving
// reads, resumes once the tmpfs is remounted bigger, and keeps every
// acknowledged write across SIGKILL and a restart. (Pebble meeting ENOSPC
// itself, when something else fills the disk between the flusher's check
// and its write, is in internal/engine's TestDiskFullENOSPC.)
func TestFullDiskENOSPCRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the counterd binary")
	}
	mnt := t.TempDir()
	mountTmpfs(t, mnt, "3m")
	data := filepath.Join(mnt, "data")
	respAddr := "127.0.0.1:" + freePort(t)
	args := []string{"--durability", "sync", "--min-free-disk", "0", "--resp", respAddr}
	p := start(t, data, args...)
	conn, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	w := fillUntilRefused(t, p, conn, rd)

	if v := getValue(t, p.addr, "n"); v < w.ackedN || v > w.sentN {
		t.Fatalf("n reads %d while full, want between %d acknowledged and %d sent", v, w.ackedN, w.sentN)
	}
	if code, body := getBody(t, p.addr+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "insufficient_storage") {
		t.Fatalf("/readyz while full: %d %s", code, body)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=64m"); err != nil {
		t.Fatalf("remount bigger: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, ec := httpWrite(t, p.addr+"/counters/n/increment", `{"delta": 1}`)
		w.sentN++
		if code == 200 {
			w.ackedN++
			break
		}
		if code != http.StatusInsufficientStorage || time.Now().After(deadline) {
			t.Fatalf("after remounting bigger: %d %s", code, ec)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := respCmd(t, conn, rd, "INCR", "n"); !strings.HasPrefix(got, ":") {
		t.Fatalf("INCR after space returned: %q", got)
	}
	w.ackedN++
	w.sentN++
	if logs := p.logs(); strings.Contains(logs, "panic") || strings.Count(logs, "storage full") != 1 || strings.Count(logs, "storage writable again") != 1 || strings.Contains(logs, "status=507") {
		t.Fatalf("want one read-only and one writable line, no panic:\n%s", logs)
	}
	p.kill(t)
	p = start(t, data, args...)
	v := getValue(t, p.addr, "n")
	p.kill(t)
	if v < w.ackedN || v > w.sentN {
		t.Fatalf("after restart n = %d, want between %d acknowledged and %d sent", v, w.ackedN, w.sentN)
	}
	t.Logf("after restart: n = %d (acknowledged %d, sent %d)", v, w.ackedN, w.sentN)
}

// filled is what fillUntilRefused acknowledged and sent.
type filled struct{ ackedN, sentN, ackedItems int64 }

// fillUntilRefused writes until both HTTP and RESP writes are refused:
// every round a PFADD of ten users over HTTP (its sketch is rewritten
// whole at each sync flush: 12 KB once dense), an INCR of n over HTTP and
// one over RESP.
func fillUntilRefused(t *testing.T, p *proc, conn net.Conn, rd *bufio.Reader) filled {
	t.Helper()
	var ackedN, sentN, ackedItems int64
	var refusedHTTP, refusedRESP string
	for i := 0; i < 20000 && (refusedHTTP == "" || refusedRESP == ""); i++ {
		items := make([]string, 10)
		for j := range items {
			items[j] = fmt.Sprintf(`"user%d"`, i*10+j)
		}
		code, ec := httpWrite(t, p.addr+"/counters/visitors/pfadd", `{"items": [`+strings.Join(items, ",")+`]}`)
		switch {
		case code == 200:
			ackedItems += int64(len(items))
		case code == http.StatusInsufficientStorage && ec == "insufficient_storage":
			refusedHTTP = ec
		default:
			t.Fatalf("PFADD %d: %d %s", i, code, ec)
		}
		sentN++
		code, ec = httpWrite(t, p.addr+"/counters/n/increment", `{"delta": 1}`)
		switch {
		case code == 200:
			ackedN++
		case code == http.StatusInsufficientStorage && ec == "insufficient_storage":
			refusedHTTP = ec
		default:
			t.Fatalf("increment %d: %d %s", i, code, ec)
		}
		sentN++
		got := respCmd(t, conn, rd, "INCR", "n")
		switch {
		case strings.HasPrefix(got, ":"):
			ackedN++
		case strings.HasPrefix(got, "-MISCONF "):
			refusedRESP = got
		default:
			t.Fatalf("INCR %d: %q", i, got)
		}
	}
	if refusedHTTP == "" || refusedRESP == "" {
		t.Fatalf("writes never refused (HTTP %q, RESP %q) after %d acknowledged", refusedHTTP, refusedRESP, ackedN+ackedItems)
	}
	t.Logf("refused after %d acknowledged increments and %d users PFADDed; RESP: %s", ackedN, ackedItems, refusedRESP)

	return filled{ackedN, sentN, ackedItems}
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
