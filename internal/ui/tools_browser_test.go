package ui_test

// Browser tests of the console's command box, its charts' ranges and
// readouts, a window counter's buckets, uniques by day and the node page.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/server"
)

// poll waits for the JavaScript condition js (generous: a loaded CI).
func poll(js string) chromedp.Action {
	return chromedp.Poll(js, nil, chromedp.WithPollingInterval(100*time.Millisecond))
}

// hover points at the element sel as a mouse would (the readouts listen
// for mouseover), without moving a real pointer.
func hover(sel string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error('no ' + %q);
		e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})); return true; })()`, sel, sel), nil)
}

// shot saves a screenshot of the element sel in the test's temporary
// directory (and under $COUNTERD_UI_SCREENSHOTS) and returns it.
func (b *browser) shot(t *testing.T, sel, name string) []byte {
	t.Helper()
	var buf []byte
	b.run(t, "screenshot "+name, chromedp.ScrollIntoView(sel), chromedp.Screenshot(sel, &buf, chromedp.NodeVisible))
	file := filepath.Join(t.TempDir(), name+".png")
	if err := os.WriteFile(file, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("COUNTERD_UI_SCREENSHOTS"); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644)
	}
	t.Logf("screenshot %s", file)
	return buf
}

// colourPixels counts the pixels of a PNG within 24 of the colour rgb.
func colourPixels(t *testing.T, pngData []byte, rgb uint32) (n, total int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	want := [3]int{int(rgb >> 16 & 0xff), int(rgb >> 8 & 0xff), int(rgb & 0xff)}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			near := true
			for i := range got {
				if d := got[i] - want[i]; d < -24 || d > 24 {
					near = false
				}
			}
			if near {
				n++
			}
			total++
		}
	}
	return n, total
}

// TestConsoleCommands: the command box runs Redis-protocol commands over
// POST /resp with the logged-in token's grants and shows replies as
// redis-cli does, exact past 2^53: a writer of c:* sets and reads
// 2^63-1, increments past 2^53, quotes an id with a space, is refused a
// key outside its grants, DEL (admin) and MULTI; the API reads what the
// box wrote. A screenshot shows the refusals in the error colour.
func TestConsoleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium; skipped with -short")
	}
	const writerTok, adminTok = "console-writer-0123456789", "console-admin-0123456789ab"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	body := fmt.Sprintf("users:\n  wendy:\n    tokens: [%q]\n    grants: {\"c:*\": write}\n  ada:\n    tokens: [%q]\n    grants: {\"*\": admin}\n",
		auth.Hash([]byte(writerTok)).String(), auth.Hash([]byte(adminTok)).String())
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, func(c *server.Config) { c.Auth = tokens })
	b := newBrowser(t)
	b.run(t, "login", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#login"),
		chromedp.SendKeys("#token", writerTok), chromedp.Click("#login-submit"), waitText("#user", "wendy"))
	b.run(t, "open the command box", chromedp.Navigate(base+"/ui/#/cli"), chromedp.WaitVisible("#cli-input"))

	n := 0
	run := func(line string) string {
		t.Helper()
		n++
		var out string
		b.run(t, line, chromedp.SetValue("#cli-input", line), chromedp.Click("#cli-run"),
			poll(fmt.Sprintf(`document.querySelectorAll('#cli-output .entry').length === %d && document.querySelector('#cli-output .entry:last-child').dataset.type !== 'pending'`, n)),
			chromedp.Evaluate(`document.querySelector('#cli-output .entry:last-child pre').textContent`, &out))
		return out
	}
	cases := []struct{ line, want string }{
		{"SET c:big 9223372036854775807", "OK"},
		{"get c:big", `"9223372036854775807"`},
		{"INCRBY c:n 9007199254740993", "(integer) 9007199254740993"},
		{"INCR c:n", "(integer) 9007199254740994"},
		{`SET "c:a b" 5`, "OK"},
		{"MGET c:big 'c:a b' c:none", "1) \"9223372036854775807\"\n2) \"5\"\n3) (nil)"},
		{"INCR c:big", "(error) ERR increment or decrement would overflow"},
		{"INCR other:x", "(error) NOPERM No permissions to access a key"},
		{"DEL c:big", "(error) NOPERM this user has no permissions to run the 'del' command"},
		{"MULTI", "(error) ERR 'multi' is not available over HTTP: only counter commands run there (a request is a connection of one command); use a Redis client on the RESP port"},
		{"SCAN 0 MATCH c:zzz*", "1) \"0\"\n2) (empty array)"},
	}
	for _, c := range cases {
		if got := run(c.line); got != c.want {
			t.Errorf("%s: the box shows %q, want %q", c.line, got, c.want)
		}
	}
	// What the box wrote, read through the API.
	for id, want := range map[string]string{"c:big": `"value":9223372036854775807`, "c:n": `"value":9007199254740994`, "c:a%20b": `"value":5`} {
		if got := call(t, "GET", base+"/counters/"+id, adminTok, "", 200); !strings.Contains(got, want) {
			t.Errorf("GET /counters/%s after the box: %s, want %s", id, got, want)
		}
	}
	// The route itself: a token is required, and the admin may DEL.
	call(t, "POST", base+"/resp", "", `["PING"]`, 401)
	call(t, "POST", base+"/resp", writerTok, `["GET"`, 400)
	if got := call(t, "POST", base+"/resp", adminTok, `["DEL","c:a b"]`, 200); got != `{"reply":{"type":"integer","value":1}}`+"\n" {
		t.Errorf("admin's DEL over POST /resp: %q", got)
	}
	if got := call(t, "GET", base+"/counters/other:x", adminTok, "", 200); !strings.Contains(got, `"exists":false`) {
		t.Errorf("the refused INCR wrote other:x: %s", got)
	}
	// A line redis-cli would refuse never reaches the server.
	n++
	var bad string
	b.run(t, "unbalanced quotes", chromedp.SetValue("#cli-input", `GET "c:big`), chromedp.Click("#cli-run"),
		poll(fmt.Sprintf(`document.querySelectorAll('#cli-output .entry').length === %d`, n)),
		chromedp.Evaluate(`document.querySelector('#cli-output .entry:last-child pre').textContent`, &bad))
	if bad != "(error) unbalanced double quotes" {
		t.Errorf("unbalanced quotes: %q", bad)
	}
	// History: the up arrow brings the last sent command back.
	var recalled string
	b.run(t, "history", chromedp.Evaluate(`document.querySelector('#cli-input').value = ''`, nil), chromedp.Focus("#cli-input"), chromedp.KeyEvent(kb.ArrowUp),
		chromedp.Evaluate(`document.querySelector('#cli-input').value`, &recalled))
	if recalled != "SCAN 0 MATCH c:zzz*" {
		t.Errorf("up arrow recalled %q", recalled)
	}
	shot := b.shot(t, "#cli-output", "cli")
	red, total := colourPixels(t, shot, 0xb91c1c) // --bad: the error replies
	ink, _ := colourPixels(t, shot, 0x1e3a8a)     // --accent: the echoed commands
	t.Logf("command box screenshot: %d pixels, %d error-coloured, %d command-coloured", total, red, ink)
	if red < 200 || ink < 200 {
		t.Errorf("command box screenshot: %d error-coloured and %d command-coloured pixels of %d; want the replies drawn", red, ink, total)
	}
	if errs := b.errors(func(e string) bool { return strings.Contains(e, "status of 403") }); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// TestConsoleSplitCommand: the box splits a line as redis-cli does, and
// quoteArg writes any argument so that the split reads it back.
func TestConsoleSplitCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium; skipped with -short")
	}
	b := newBrowser(t)
	base := startServer(t, nil)
	b.run(t, "open", chromedp.Navigate(base+"/ui/#/cli"), chromedp.WaitVisible("#cli-input"))
	await := func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }
	split := func(t interface{ Fatalf(string, ...any) }, js string) (args []string, err string) {
		var a struct {
			Args []string `json:"args"`
			Err  string   `json:"err"`
		}
		ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
		defer cancel()
		if e := chromedp.Run(ctx, chromedp.Evaluate(`import('/ui/js/cli.js').then(m => { try { return {args: `+js+`}; } catch (e) { return {err: String(e)}; } })`, &a, await)); e != nil {
			t.Fatalf("evaluate: %v", e)
		}
		return a.Args, a.Err
	}
	for line, want := range map[string][]string{
		`set "a b" 'c\'d' "\x41\n"`: {"set", "a b", "c'd", "A\n"},
		`  INCR   views:home  `:     {"INCR", "views:home"},
		`get ""`:                    {"get", ""},
		``:                          nil,
	} {
		lit := fmt.Sprintf("m.splitCommand(%s)", jsString(line))
		if got, err := split(t, lit); err != "" || strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("splitCommand(%q) = %q, %s; want %q", line, got, err, want)
		}
	}
	for _, bad := range []string{`get "abc`, `get 'abc`, `get "a"b`, `get 'a'b`} {
		if got, err := split(t, fmt.Sprintf("m.splitCommand(%s)", jsString(bad))); err == "" {
			t.Errorf("splitCommand(%q) = %q, want a SyntaxError", bad, got)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		args := rapid.SliceOfN(rapid.String(), 1, 5).Draw(rt, "args")
		lits, _ := json.Marshal(args)
		_ = json.Unmarshal(lits, &args) // as JavaScript reads them (invalid UTF-8 replaced)
		js := fmt.Sprintf("m.splitCommand(%s.map(m.quoteArg).join(' '))", lits)
		got, err := split(rt, js)
		if err != "" || strings.Join(got, "\x00") != strings.Join(args, "\x00") || len(got) != len(args) {
			rt.Fatalf("split(quote(%q)) = %q, %s", args, got, err)
		}
	})
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestConsoleCharts: the series chart's readout shows a bar's exact count
// (2^63-1), a custom range picks its granularity, a window counter shows
// its buckets, an hll page charts uniques by day, and the node page
// graphs the node's own figures from GET /node/stats; screenshots of the
// charts are checked for drawn bars and lines.
func TestConsoleCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium; skipped with -short")
	}
	b := newBrowser(t)
	base := startServer(t, func(c *server.Config) { c.NodeStatsInterval = time.Second })
	call(t, "PUT", base+"/rollups/p", "", `{"minute":"2d","hour":"90d","day":"400d"}`, 200)
	call(t, "POST", base+"/counters/p:big/increment", "", `{"delta":9223372036854775807}`, 200)

	const maxText = "9,223,372,036,854,775,807"
	bar := `#series-chart .bucket[data-count="9223372036854775807"]`
	b.run(t, "series", chromedp.Navigate(base+"/ui/#/counter/p%3Abig"), waitText("#live-value", maxText),
		chromedp.WaitVisible(`#series-chart svg rect.bar`), poll(fmt.Sprintf(`!!document.querySelector(%q)`, bar)),
		hover(bar), waitContains("#series-tip", ": "+maxText))
	// The readout stays on the bucket across the live redraws (every 3 s).
	b.run(t, "readout after a redraw", chromedp.Sleep(4*time.Second), waitContains("#series-tip", ": "+maxText),
		poll(fmt.Sprintf(`document.querySelector(%q).classList.contains('hover')`, bar)))
	// Custom ranges: two hours read by minute, ten days by day.
	custom := func(hours int) chromedp.Action {
		return chromedp.Evaluate(fmt.Sprintf(`(() => {
			const p = (n) => String(n).padStart(2, '0');
			const local = (d) => d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + 'T' + p(d.getHours()) + ':' + p(d.getMinutes());
			const now = new Date();
			document.querySelector('#range-from').value = local(new Date(now.getTime() - %d * 3600e3));
			document.querySelector('#range-to').value = local(new Date(now.getTime() + 120e3));
			document.querySelector('#range-custom button').click();
			return true; })()`, hours), nil)
	}
	b.run(t, "custom range", chromedp.SetValue("#series-range", "custom"),
		chromedp.Evaluate(`document.querySelector('#series-range').dispatchEvent(new Event('change'))`, nil),
		chromedp.WaitVisible("#range-custom"), custom(2),
		chromedp.WaitVisible(`#series-chart[data-range="custom"][data-granularity="minute"] svg rect.bar`), waitContains("#series-total", "total "+maxText))
	b.run(t, "custom 10 days", custom(240),
		chromedp.WaitVisible(`#series-chart[data-range="custom"][data-granularity="day"] svg rect.bar`), waitContains("#series-total", " day buckets from "))
	shot := b.shot(t, "#series-chart svg", "series-custom")
	if n, total := colourPixels(t, shot, 0x2563eb); n < 500 {
		t.Errorf("custom range chart: %d bar pixels of %d, want a drawn bar", n, total)
	}

	// A window counter's buckets, live.
	call(t, "POST", base+"/counters/w:x/increment", "", `{"kind":"window","granularity":"1m","window":"1h","delta":5}`, 200)
	b.run(t, "window", chromedp.Navigate(base+"/ui/#/counter/w%3Ax"), waitText("#live-value", "5"),
		chromedp.WaitVisible(`#window-chart svg rect.bar`), waitContains("#window-spec", "sliding window of 1h0m0s, 1m0s buckets"),
		hover(`#window-chart .bucket[data-count="5"]`), waitContains("#window-tip", ": 5"))
	call(t, "POST", base+"/counters/w:x/increment", "", `{"delta":9007199254740993}`, 200)
	b.run(t, "window live", waitText("#live-value", "9,007,199,254,740,998"),
		poll(`!!document.querySelector('#window-chart .bucket[data-count="9007199254740998"]') || !!document.querySelector('#window-chart .bucket[data-count="9007199254740993"]')`))
	// Every bucket of the hour's window is drawn, empty ones included.
	var nb string
	b.run(t, "window buckets", chromedp.Evaluate(`document.querySelector('#window-chart').dataset.buckets`, &nb))
	if nb != "60" {
		t.Errorf("window chart draws %s buckets, want the window's 60", nb)
	}
	shot = b.shot(t, "#window-chart svg", "window")
	if n, total := colourPixels(t, shot, 0x2563eb); n < 300 {
		t.Errorf("window chart: %d bar pixels of %d, want a drawn bucket", n, total)
	}

	// Uniques by day of an hll counter. The first bar (the last 7 days)
	// holds the items whatever the time; the others too unless a UTC day
	// began since the PFADD (then today's is 0).
	day := time.Now().UTC().Format(time.DateOnly)
	call(t, "POST", base+"/counters/p:visitors/pfadd", "", `{"items":["a","b","c"]}`, 200)
	b.run(t, "uniques by day", chromedp.Navigate(base+"/ui/#/counter/p%3Avisitors"), waitText("#uniques-value .big", "3"),
		chromedp.WaitVisible(`#uniques-chart[data-days="7"] svg rect.bar`), hover(`#uniques-chart .bucket`),
		waitContains("#uniques-tip", ": 3"))
	var counts []string
	b.run(t, "uniques counts", chromedp.Evaluate(`[...document.querySelectorAll('#uniques-chart .bucket')].map(g => g.dataset.count)`, &counts))
	if got := strings.Join(counts, ","); got != "3,3,3,3,3,3,3" && !(time.Now().UTC().Format(time.DateOnly) != day && strings.HasPrefix(got, "3,")) {
		t.Errorf("uniques by day: %v, want 3 for every day through today", counts)
	}
	b.shot(t, "#uniques-chart svg", "uniques")

	// The node page: samples every second here (10 s by default).
	for range 20 {
		call(t, "GET", base+"/counters/p:big", "", "", 200)
	}
	b.run(t, "node page", chromedp.Navigate(base+"/ui/#/node"), chromedp.WaitVisible("#node-rate-chart svg"),
		poll(`Number(document.querySelector('#node-rate-chart').dataset.points) >= 2 && Number(document.querySelector('#node-latency-chart').dataset.points) >= 1`),
		waitContains("#node-latest-replication_lag_s", "not a cluster member"),
		waitContains("#node-latest-stream_lag", "no event stream"),
		hover(`#node-rate-chart circle.point`), waitContains("#node-rate-tip", "requests (HTTP + RESP)"))
	var rate string
	b.run(t, "latest rate", chromedp.Text("#node-latest-requests_per_s", &rate))
	if !strings.HasSuffix(rate, " /s") || rate == "— /s" {
		t.Errorf("latest request rate %q", rate)
	}
	// The figures agree with the route.
	stats := call(t, "GET", base+"/node/stats", "", "", 200)
	if !strings.Contains(stats, `"interval_s":1`) || !strings.Contains(stats, `"replication_lag_s":null`) {
		t.Errorf("GET /node/stats: %s", stats)
	}
	shot = b.shot(t, "#node-rate-chart svg", "node-rate")
	if n, total := colourPixels(t, shot, 0x2563eb); n < 100 {
		t.Errorf("node rate chart: %d line pixels of %d, want a drawn line", n, total)
	}
	b.keep(t, "node")
	if errs := b.errors(nil); len(errs) > 0 {
		t.Errorf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}
