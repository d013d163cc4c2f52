// Command benchreport runs counterd's headline benchmarks side by side and
// writes a Markdown report with PNG charts (make bench-report):
//
//   - RESP: scripts/bench-resp.sh, redis-benchmark against counterd and a
//     real redis-server, alternating, same run;
//   - HTTP: scripts/bench-http.sh, wrk increments, async vs sync;
//   - hot key: BenchmarkHotKeyAdd against BenchmarkRawAtomicAdd and
//     BenchmarkKeyedAtomicAdd, same go test run;
//   - memory: BenchmarkIdleCounterBytes.
//
// Every figure is quoted with its command and the load average before and
// after, since the machine may be shared; ratios against the baseline of
// the same run are what to compare across runs.
//
// Usage (from the repository root):
//
//	go run ./scripts/benchreport [-out docs/bench] [-resp-n 100000] [-resp-rounds 1]
//	                             [-http-secs 5] [-hot-count 3] [-skip resp,http,hot,mem]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func main() {
	out := flag.String("out", "docs/bench", "directory for report.md and the PNG charts")
	respN := flag.Int("resp-n", 100000, "redis-benchmark requests per run (bench-resp.sh -n)")
	respRounds := flag.Int("resp-rounds", 1, "bench-resp.sh rounds (-R)")
	httpSecs := flag.Int("http-secs", 5, "seconds per wrk run (bench-http.sh)")
	hotCount := flag.Int("hot-count", 3, "go test -count of the hot-key benchmarks")
	skip := flag.String("skip", "", "comma-separated parts to skip: resp, http, hot, mem")
	flag.Parse()
	skipped := map[string]bool{}
	for _, s := range strings.Split(*skip, ",") {
		skipped[strings.TrimSpace(s)] = true
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	r := &report{dir: *out, start: time.Now(), loadStart: loadAvg()}
	if !skipped["resp"] {
		r.runRESP(*respN, *respRounds)
	}
	if !skipped["http"] {
		r.runHTTP(*httpSecs)
	}
	if !skipped["hot"] {
		r.runHot(*hotCount)
	}
	if !skipped["mem"] {
		r.runMem()
	}
	r.loadEnd = loadAvg()
	if err := r.write(); err != nil {
		fatal(err)
	}
	fmt.Println("wrote", filepath.Join(*out, "report.md"))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchreport:", err)
	os.Exit(1)
}

type report struct {
	dir                string
	start              time.Time
	loadStart, loadEnd string
	sections           []string // Markdown, in order
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// run runs a command, echoing its output, and returns the output.
func run(name string, args ...string) string {
	fmt.Fprintf(os.Stderr, "== %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		os.Stderr.Write(buf.Bytes())
		fatal(fmt.Errorf("%s: %w", name, err))
	}
	os.Stderr.Write(buf.Bytes())
	return buf.String()
}

func (r *report) add(format string, args ...any) {
	r.sections = append(r.sections, fmt.Sprintf(format, args...))
}

// runRESP parses bench-resp.sh's summary: after "median of", one line per
// test: name, Redis req/s, counterd req/s, ratio, p50 r / c, p99 r / c.
func (r *report) runRESP(n, rounds int) {
	args := []string{"-n", strconv.Itoa(n), "-R", strconv.Itoa(rounds)}
	load := loadAvg()
	outp := run("scripts/bench-resp.sh", args...)
	type row struct {
		test        string
		redis, ctrd float64
		ratio       string
		p50, p99    string
		cpu         string
		rcpu, ccpu  float64
	}
	var rows []row
	summary := false
	sc := bufio.NewScanner(strings.NewReader(outp))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "median of") {
			summary = true
			continue
		}
		f := strings.Fields(line)
		if !summary || len(f) < 10 || f[0] == "test" {
			continue
		}
		rr, _ := strconv.ParseFloat(f[1], 64)
		cr, _ := strconv.ParseFloat(f[2], 64)
		x := row{test: f[0], redis: rr, ctrd: cr, ratio: f[3],
			p50: f[4] + " / " + f[6], p99: f[7] + " / " + f[9], cpu: "n/a"}
		if len(f) >= 13 {
			x.cpu = f[10] + " / " + f[12]
			x.rcpu, _ = strconv.ParseFloat(f[10], 64)
			x.ccpu, _ = strconv.ParseFloat(f[12], 64)
		}
		rows = append(rows, x)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Redis protocol vs Redis\n\n```sh\nscripts/bench-resp.sh %s\n```\n\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "Load average before: %s. Redis with AOF everysec, counterd with --durability async.\n\n", load)
	b.WriteString("| test | Redis req/s | counterd req/s | counterd/Redis | p50 ms Redis / counterd | p99 ms Redis / counterd | server CPU µs/request Redis / counterd |\n|---|---|---|---|---|---|---|\n")
	var labels []string
	var rv, cv, rcpu, ccpu plotter.Values
	for _, x := range rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %s | %s | %s | %s |\n", x.test, x.redis, x.ctrd, x.ratio, x.p50, x.p99, x.cpu)
		labels = append(labels, x.test)
		rv = append(rv, x.redis)
		cv = append(cv, x.ctrd)
		rcpu = append(rcpu, x.rcpu)
		ccpu = append(ccpu, x.ccpu)
	}
	b.WriteString("\nServer CPU per request (user + system time of the server process over the run, divided by the requests) is much less disturbed by other jobs than requests/s: on a quiet machine with the load generator on the same cores, less CPU per request is more requests/s.\n")
	if len(rows) > 0 {
		r.bars("resp.png", "redis-benchmark: requests/s (higher is better)", "req/s", labels,
			[]string{"Redis", "counterd"}, []plotter.Values{rv, cv})
		var ratio plotter.Values
		for i := range rv {
			ratio = append(ratio, cv[i]/max(rv[i], 1))
		}
		r.bars("resp-ratio.png", "counterd / Redis throughput (goal: at least 1.0)", "ratio", labels,
			[]string{"counterd/Redis"}, []plotter.Values{ratio})
		r.bars("resp-cpu.png", "Server CPU per request, µs (lower is better)", "µs/request", labels,
			[]string{"Redis", "counterd"}, []plotter.Values{rcpu, ccpu})
		b.WriteString("\n![RESP throughput](resp.png)\n\n![RESP ratio](resp-ratio.png)\n\n![RESP server CPU per request](resp-cpu.png)\n")
	} else {
		b.WriteString("\n(no summary lines parsed; see the script's output)\n")
	}
	r.add("%s", b.String())
}

// runHTTP parses bench-http.sh's table: "round mode req/s p50 p99".
func (r *report) runHTTP(secs int) {
	load := loadAvg()
	outp := run("scripts/bench-http.sh", "1", strconv.Itoa(secs))
	var b strings.Builder
	fmt.Fprintf(&b, "## HTTP increments, async vs sync\n\n```sh\nscripts/bench-http.sh 1 %d\n```\n\n", secs)
	fmt.Fprintf(&b, "Load average before: %s.\n\n| mode | req/s | p50 | p99 |\n|---|---|---|---|\n", load)
	var labels []string
	var vals plotter.Values
	sc := bufio.NewScanner(strings.NewReader(outp))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 5 && (f[1] == "async" || f[1] == "sync") {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s |\n", f[1], v, f[3], f[4])
			labels = append(labels, f[1])
			vals = append(vals, v)
		}
		if strings.HasPrefix(sc.Text(), "median sync/async") {
			fmt.Fprintf(&b, "\n%s\n", sc.Text())
		}
	}
	if len(vals) > 0 {
		r.bars("http.png", "HTTP increments/s, one hot counter (higher is better)", "req/s", labels,
			[]string{"counterd"}, []plotter.Values{vals})
		b.WriteString("\n![HTTP throughput](http.png)\n")
	}
	r.add("%s", b.String())
}

// goBench runs go test benchmarks and returns the median of each metric
// (by benchmark name without the -P suffix, then unit).
func goBench(args ...string) map[string]map[string]float64 {
	outp := run("go", append([]string{"test", "-run", "^$"}, args...)...)
	all := map[string]map[string][]float64{}
	sc := bufio.NewScanner(strings.NewReader(outp))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		if all[name] == nil {
			all[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				all[name][f[i+1]] = append(all[name][f[i+1]], v)
			}
		}
	}
	med := map[string]map[string]float64{}
	for name, units := range all {
		med[name] = map[string]float64{}
		for u, vs := range units {
			sort.Float64s(vs)
			med[name][u] = vs[len(vs)/2]
		}
	}
	return med
}

func (r *report) runHot(count int) {
	load := loadAvg()
	args := []string{"-bench", "HotKeyAdd$|RawAtomicAdd$|KeyedAtomicAdd$", "-benchmem", "-benchtime=1s", "-count=" + strconv.Itoa(count), "./internal/engine/"}
	m := goBench(args...)
	var b strings.Builder
	fmt.Fprintf(&b, "## Engine: one hot counter\n\n```sh\ngo test -run '^$' -bench '%s' %s\n```\n\n", args[1], strings.Join(args[2:], " "))
	fmt.Fprintf(&b, "Load average before: %s. Median of %d runs, RunParallel with GOMAXPROCS=%d.\n\n", load, count, runtime.GOMAXPROCS(0))
	b.WriteString("| benchmark | ns/op | allocs/op | vs raw atomic |\n|---|---|---|---|\n")
	raw := m["BenchmarkRawAtomicAdd"]["ns/op"]
	var labels []string
	var vals plotter.Values
	for _, name := range []string{"BenchmarkRawAtomicAdd", "BenchmarkKeyedAtomicAdd", "BenchmarkHotKeyAdd"} {
		x, ok := m[name]
		if !ok {
			continue
		}
		ratio := "n/a"
		if raw > 0 {
			ratio = fmt.Sprintf("%.1fx", x["ns/op"]/raw)
		}
		fmt.Fprintf(&b, "| `%s` | %.1f | %.0f | %s |\n", name, x["ns/op"], x["allocs/op"], ratio)
		labels = append(labels, strings.TrimPrefix(name, "Benchmark"))
		vals = append(vals, x["ns/op"])
	}
	b.WriteString("\nGoal: `HotKeyAdd` at most 10x `RawAtomicAdd`, 0 allocs/op.\n")
	if len(vals) > 0 {
		r.bars("hotkey.png", "One hot counter: ns per add (lower is better)", "ns/op", labels,
			[]string{"ns/op"}, []plotter.Values{vals})
		b.WriteString("\n![hot key](hotkey.png)\n")
	}
	r.add("%s", b.String())
}

func (r *report) runMem() {
	load := loadAvg()
	args := []string{"-bench", "IdleCounterBytes", "-benchtime=1x", "./internal/engine/"}
	m := goBench(args...)
	per := m["BenchmarkIdleCounterBytes"]["B/counter"]
	var b strings.Builder
	fmt.Fprintf(&b, "## Engine: memory per idle counter\n\n```sh\ngo test -run '^$' %s\n```\n\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "Load average before: %s (memory does not depend on load).\n\n", load)
	fmt.Fprintf(&b, "1,000,000 counters with 24-byte ids: **%.2f B per counter** (entry, index and id bytes included; goal at most 64 B).\n", per)
	r.bars("memory.png", "Heap bytes per idle counter (lower is better)", "bytes", []string{"counterd", "goal"},
		[]string{"B/counter"}, []plotter.Values{{per, 64}})
	b.WriteString("\n![memory](memory.png)\n")
	r.add("%s", b.String())
}

// bars draws a (grouped) bar chart: one group per label, one bar per series.
func (r *report) bars(file, title, ylabel string, labels, series []string, vals []plotter.Values) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	w := vg.Points(60 / float64(len(series)))
	for i, v := range vals {
		bc, err := plotter.NewBarChart(v, w)
		if err != nil {
			fatal(err)
		}
		bc.LineStyle.Width = 0
		bc.Color = seriesColor(i)
		bc.Offset = vg.Length(float64(i)-float64(len(vals)-1)/2) * w
		p.Add(bc)
		if len(series) > 1 {
			p.Legend.Add(series[i], bc)
		}
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	if err := p.Save(vg.Length(110+90*len(labels))*vg.Millimeter/4, 90*vg.Millimeter, filepath.Join(r.dir, file)); err != nil {
		fatal(err)
	}
}

func seriesColor(i int) color.Color {
	if i == 0 {
		return color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // Redis red
	}
	return plotutil.Color(i)
}

func (r *report) write() error {
	var b strings.Builder
	b.WriteString("# Benchmark report\n\n")
	b.WriteString("Written by `make bench-report` (scripts/benchreport). Ratios against a baseline of the same run are what to compare across runs; absolute figures depend on the machine and its load.\n\n")
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "- started %s, took %s\n- %d cores (GOMAXPROCS %d), %s/%s, %s, host %s\n- load average (1, 5, 15 min) before: %s; after: %s\n\n",
		r.start.UTC().Format(time.RFC3339), time.Since(r.start).Round(time.Second), runtime.NumCPU(), runtime.GOMAXPROCS(0),
		runtime.GOOS, runtime.GOARCH, runtime.Version(), host, r.loadStart, r.loadEnd)
	b.WriteString(strings.Join(r.sections, "\n"))
	return os.WriteFile(filepath.Join(r.dir, "report.md"), []byte(b.String()), 0o644)
}
