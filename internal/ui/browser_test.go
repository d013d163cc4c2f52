package ui_test

// Browser tests of the console: a real counterd server (server.Run, the
// real router, on a free loopback port) and Debian's chromium, headless,
// driven by chromedp over the DevTools protocol.

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/server"
)

// chromium finds the browser: $COUNTERD_CHROMIUM, else chromium on PATH.
// Without one the test skips, or fails under COUNTERD_REQUIRE_SERVICES=1.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("COUNTERD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("COUNTERD_REQUIRE_SERVICES") == "1" {
		t.Fatal("chromium not found in PATH and COUNTERD_REQUIRE_SERVICES=1: install Debian's chromium (scripts/install-deps.sh) or set COUNTERD_CHROMIUM")
	}
	t.Skip("chromium not found in PATH; install Debian's chromium (scripts/install-deps.sh) or set COUNTERD_CHROMIUM to run the browser tests (COUNTERD_REQUIRE_SERVICES=1 makes this a failure)")
	return ""
}

var listenRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)

// logWriter keeps the server's log and reports its HTTP address.
type logWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addrc chan string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := listenRE.FindSubmatch(p); m != nil {
		select {
		case w.addrc <- string(m[1]):
		default:
		}
	}
	return w.buf.Write(p)
}

// startServer runs counterd in this process with edit applied to its
// default configuration (HTTP only, on a free loopback port, data in a
// temporary directory) and returns its base URL.
func startServer(t *testing.T, edit func(*server.Config)) string {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.RESP, cfg.GRPC = "127.0.0.1:0", "", ""
	if edit != nil {
		edit(&cfg)
	}
	lw := &logWriter{addrc: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg, slog.New(slog.NewTextHandler(lw, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
		if t.Failed() {
			lw.mu.Lock()
			t.Logf("server log:\n%s", lw.buf.String())
			lw.mu.Unlock()
		}
	})
	select {
	case addr := <-lw.addrc:
		return "http://" + addr
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("server did not start within 60s")
	}
	return ""
}

// call sends one API request (no Origin: a server-side client) and fails
// the test unless it answers want.
func call(t *testing.T, method, url, token, body string, want int) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, res.StatusCode, b, want)
	}
	return string(b)
}

// browser is one headless chromium with a fresh profile, and what its
// page reported as errors.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	// Not t.TempDir: chromium's helper processes may still write to the
	// profile for a moment after the browser exits, which would fail the
	// test's own cleanup.
	profile, err := os.MkdirTemp("", "counterd-ui-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // waits for the browser process
		for i := 0; ; i++ {
			err := os.RemoveAll(profile)
			if err == nil {
				return
			}
			if i == 50 {
				t.Logf("leaving chromium profile %s: %v", profile, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.APITypeError && ev.Type != runtime.APITypeAssert && ev.Type != runtime.APITypeWarning {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			msg = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
		case *runtime.EventExceptionThrown:
			msg = "exception: " + ev.ExceptionDetails.Error()
		case *log.EventEntryAdded:
			if ev.Entry.Level != log.LevelError && ev.Entry.Level != log.LevelWarning {
				return
			}
			msg = fmt.Sprintf("log %s/%s: %s %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
		default:
			return
		}
		b.mu.Lock()
		b.errs = append(b.errs, msg)
		b.mu.Unlock()
	})
	// The first Run starts chromium, which lives as long as the context it
	// gets: ctx itself, not one with a deadline.
	if err := chromedp.Run(ctx, runtime.Enable(), log.Enable()); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return b
}

// run runs actions within a generous deadline (the machine may be loaded).
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (page errors so far: %q)", what, err, b.errors(nil))
	}
}

// keep saves a screenshot of the whole page as name.png under
// $COUNTERD_UI_SCREENSHOTS, when set, for a person to look at.
func (b *browser) keep(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("COUNTERD_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	var buf []byte
	b.run(t, "page screenshot", chromedp.FullScreenshot(&buf, 100))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// errors returns the page's errors, less those ignore accepts.
func (b *browser) errors(ignore func(string) bool) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.errs {
		if ignore == nil || !ignore(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitText waits until the text of the element sel is want.
func waitText(sel, want string) chromedp.Action {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.trim() === %q; })()`, sel, want)
	return chromedp.Poll(js, nil, chromedp.WithPollingInterval(100*time.Millisecond))
}

// waitContains waits until the text of the element sel contains want.
func waitContains(sel, want string) chromedp.Action {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want)
	return chromedp.Poll(js, nil, chromedp.WithPollingInterval(100*time.Millisecond))
}

// barPixels decodes a PNG screenshot and counts the pixels of the chart's
// bar colour (#2563eb, style.css --bar) and of its white background.
func barPixels(t *testing.T, pngData []byte) (bar, background, total int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	near := func(a, b uint32) bool { d := int(a>>8) - int(b); return d > -24 && d < 24 }
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			switch {
			case near(r, 0x25) && near(g, 0x63) && near(b, 0xeb):
				bar++
			case r>>8 > 245 && g>>8 > 245 && b>>8 > 245:
				background++
			}
			total++
		}
	}
	return bar, background, total
}

// TestConsoleBrowser: the console loads in headless chromium without a
// console error, lists a counter incremented through the API, draws its
// series chart (checked on a screenshot), follows its live value, and
// shows the mode, the rate-limit policies and a recent decision.
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium; skipped with -short")
	}
	b := newBrowser(t)
	base := startServer(t, nil)
	call(t, "PUT", base+"/rollups/page_views", "", `{"minute":"2d","hour":"90d"}`, 200)
	call(t, "POST", base+"/counters/page_views:home/increment", "", `{"delta":5}`, 200)
	call(t, "POST", base+"/counters/other:x/increment", "", `{"delta":1}`, 200)

	// / redirects to the console, which lists every counter.
	row := `#counter-list tr[data-id="page_views:home"]`
	b.run(t, "open /", chromedp.Navigate(base+"/"), chromedp.WaitVisible(row),
		waitText(row+` td.num`, "5"), waitContains("#aggregate", "2 counters"))
	b.keep(t, "counters")
	var loc string
	b.run(t, "location", chromedp.Location(&loc))
	if !strings.HasPrefix(loc, base+"/ui/") {
		t.Errorf("/ led to %s, want %s/ui/", loc, base)
	}

	// Search by prefix.
	b.run(t, "search", chromedp.Clear("#prefix"), chromedp.SendKeys("#prefix", "page_"), chromedp.Click("#search button"),
		waitContains("#aggregate", "1 counter with prefix"), chromedp.WaitVisible(row))
	var n int
	b.run(t, "count rows", chromedp.Evaluate(`document.querySelectorAll('#counter-list tbody tr').length`, &n))
	if n != 1 {
		t.Errorf("prefix page_: %d rows, want 1", n)
	}

	// The counter's page: value, series chart.
	b.run(t, "open counter", chromedp.Click(row+` a`), waitText("#counter-id", "page_views:home"),
		waitText("#live-value", "5"), chromedp.WaitVisible(`#series-chart svg rect.bar`),
		waitContains("#series-total", "total 5"))
	var shot []byte
	b.run(t, "screenshot", chromedp.Screenshot(`#series-chart svg`, &shot, chromedp.NodeVisible))
	file := filepath.Join(t.TempDir(), "series.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	bar, bg, total := barPixels(t, shot)
	t.Logf("series chart screenshot %s: %d pixels, %d bar, %d background", file, total, bar, bg)
	// One bucket holds every increment, so its bar spans the plot's
	// height (about 11x210 px); the rest of the chart is background.
	if bar < 1000 || bg < total/2 {
		t.Errorf("series chart: %d bar and %d background pixels of %d; want a drawn bar on a blank chart (%s)", bar, bg, total, file)
	}
	// Each granularity of the spec has a tab; hour draws as well.
	b.run(t, "hour tab", chromedp.Click(`button[data-granularity="hour"]`),
		chromedp.WaitVisible(`#series-chart[data-granularity="hour"] svg rect.bar`))
	var tabs []string
	b.run(t, "tabs", chromedp.Evaluate(`[...document.querySelectorAll('button[data-granularity]')].map(b => b.dataset.granularity)`, &tabs))
	if strings.Join(tabs, ",") != "minute,hour,day,month" {
		t.Errorf("granularity tabs %v", tabs)
	}

	// The live value follows an increment made through the API.
	call(t, "POST", base+"/counters/page_views:home/increment", "", `{"delta":2}`, 200)
	b.run(t, "live value", waitText("#live-value", "7"))
	b.keep(t, "counter")

	// Uniques of an hll counter.
	call(t, "POST", base+"/counters/page_views:visitors/pfadd", "", `{"items":["a","b","c"]}`, 200)
	b.run(t, "uniques", chromedp.Navigate(base+"/ui/#/counter/page_views%3Avisitors"),
		waitText("#counter-kind", "hll"), waitText("#uniques-value .big", "3"))
	b.keep(t, "uniques")

	// Cluster page in embedded mode, rate limits with a recent decision.
	call(t, "POST", base+"/ratelimit/check", "", `{"key":"api:alice","limits":[{"name":"per-minute","limit":10,"period":"1m"}]}`, 200)
	b.run(t, "cluster", chromedp.Navigate(base+"/ui/#/cluster"), waitContains("#cluster-mode", "embedded mode"))
	b.run(t, "rate limits", chromedp.Navigate(base+"/ui/#/ratelimit"),
		waitContains("#decisions", "api:alice"), waitContains("#decisions", "per-minute"))
	b.keep(t, "ratelimit")

	// The cluster page of a one-node cluster: its member, owning the
	// whole ring, and its replication lag.
	gossip := freeAddr(t)
	cbase := startServer(t, func(c *server.Config) {
		c.NodeID, c.Gossip, c.Join, c.GRPC = "console-1", gossip, gossip, "127.0.0.1:0"
	})
	member := `#members tr[data-member="console-1"]`
	b.run(t, "cluster mode", chromedp.Navigate(cbase+"/ui/#/cluster"), chromedp.WaitVisible(member),
		waitContains(member, "alive"), waitContains(member, "100.0%"), waitContains("#replication-lag", " s"))
	b.keep(t, "cluster")

	// The cluster page's Prometheus text parser, on the cases the live
	// page may not show: labels, comments, exponents, NaN, junk.
	var sums map[string]float64
	b.run(t, "metricSums", chromedp.Evaluate(`import('/ui/js/cluster.js').then(m => m.metricSums(
		"# HELP a_total x\n# TYPE a_total counter\na_total{op=\"get\",result=\"ok\"} 3\na_total{op=\"set\"} 4\n" +
		"lag_seconds 1.5e-3\nbad_metric NaN\n{junk} 7\nspaced   2\n"))`, &sums,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if sums["a_total"] != 7 || sums["lag_seconds"] != 0.0015 || sums["spaced"] != 2 || len(sums) != 3 {
		t.Errorf("metricSums: %v", sums)
	}

	if errs := b.errors(nil); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// freeAddr is a loopback address with a port free for TCP and UDP now
// (gossip binds both).
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return ""
}

// TestConsoleLogin: with --auth the console asks for a token, refuses a
// wrong one, and with the right one reads the API with it as a Bearer
// token, for the rest of the tab's session.
func TestConsoleLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium; skipped with -short")
	}
	const token = "console-admin-0123456789abcdef"
	b := newBrowser(t)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	body := fmt.Sprintf("users:\n  admin:\n    tokens: [%q]\n    grants: {\"*\": admin}\n", auth.Hash([]byte(token)).String())
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, func(c *server.Config) { c.Auth = tokens })
	call(t, "POST", base+"/counters/page_views:home/increment", "", `{"delta":1}`, 401)
	call(t, "POST", base+"/counters/page_views:home/increment", token, `{"delta":4}`, 200)

	b.run(t, "open", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#login"))
	b.run(t, "wrong token", chromedp.SendKeys("#token", "not-the-token"), chromedp.Click("#login-submit"),
		waitContains("#login-error", "Token refused"))
	b.keep(t, "login")
	row := `#counter-list tr[data-id="page_views:home"]`
	b.run(t, "right token", chromedp.SendKeys("#token", token), chromedp.Click("#login-submit"),
		chromedp.WaitVisible(row), waitText(row+" td.num", "4"), chromedp.WaitVisible("#logout"))
	// The token lives in the tab's sessionStorage: a reload stays logged in.
	b.run(t, "reload", chromedp.Reload(), chromedp.WaitVisible(row), waitText(row+" td.num", "4"))
	var stored string
	b.run(t, "storage", chromedp.Evaluate(`sessionStorage.getItem('counterd.token')`, &stored))
	if stored != token {
		t.Errorf("sessionStorage holds %q", stored)
	}
	b.run(t, "logout", chromedp.Click("#logout"), chromedp.WaitVisible("#login"))
	b.run(t, "storage after logout", chromedp.Evaluate(`sessionStorage.getItem('counterd.token') || ''`, &stored))
	if stored != "" {
		t.Errorf("sessionStorage holds %q after logging out", stored)
	}

	// The wrong token's request is the one 401 the browser may log.
	refused := func(e string) bool { return strings.Contains(e, "status of 401") }
	if errs := b.errors(refused); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}
