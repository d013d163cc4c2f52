package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// global drives one limit from every node of a cluster at full speed
// (scripts/bench-ratelimit-global.sh) and measures checks/s and the
// admissions per window:
//
//	rlbench global -target counterd-http|gubernator-http -addrs A,B,C [-c 16] [-d 10s] [-warmup 1s] [-limit 1000] [-period 1s] [-key K] [-policy hot]
//
// counterd: POST /ratelimit/check {"key": "hot:K", "policy": P} (the
// script puts policy "hot": fixed_window, -limit per -period, scope
// global-approx, and "own", the same decided on the key's owner); its windows are aligned to the Unix epoch, and an
// admission counts in the window of its answer's arrival.
// gubernator: POST /v1/GetRateLimits with behavior GLOBAL (2) and
// TOKEN_BUCKET (0), whose bucket refills whole at reset_time: an
// admission counts in the window its answer's reset_time names.
//
// It prints one line: checks, checks_per_s, admitted, per_period
// (admitted per period on average over the run) and mean_overshoot_pct
// (how far that is above -limit, in % of it: the measure that does not
// depend on how windows are told apart), windows (complete windows
// seen), max_window (most admissions in one of them), overshoot_pct
// (max_window above -limit, in %), and the admissions of every window.
func global(args []string) error {
	fs := flag.NewFlagSet("global", flag.ExitOnError)
	target := fs.String("target", "", "counterd-http or gubernator-http")
	addrs := fs.String("addrs", "", "comma-separated host:port of the nodes")
	conc := fs.Int("c", 16, "concurrent workers per node")
	dur := fs.Duration("d", 10*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "unmeasured warm-up")
	limit := fs.Int64("limit", 1000, "the limit per period")
	period := fs.Duration("period", time.Second, "the period")
	key := fs.String("key", "bench", "the one key")
	policy := fs.String("policy", "hot", "counterd: the policy checked")
	fs.Parse(args)
	nodes := strings.Split(*addrs, ",")
	if *addrs == "" {
		return errors.New("global: -addrs is required")
	}
	var url func(string) string
	var body []byte
	switch *target {
	case "counterd-http":
		url = func(a string) string { return "http://" + a + "/ratelimit/check" }
		body = fmt.Appendf(nil, `{"key":%q,"policy":%q}`, "hot:"+*key, *policy)
	case "gubernator-http":
		url = func(a string) string { return "http://" + a + "/v1/GetRateLimits" }
		body = fmt.Appendf(nil, `{"requests":[{"name":"hot","unique_key":%q,"hits":1,"limit":%d,"duration":%d,"algorithm":0,"behavior":2}]}`,
			*key, *limit, period.Milliseconds())
	default:
		return fmt.Errorf("global: unknown target %q", *target)
	}
	tr := &http.Transport{MaxIdleConns: *conc * len(nodes), MaxIdleConnsPerHost: *conc, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()

	var measuring, stop atomic.Bool
	var total, errs atomic.Int64
	var firstErr atomic.Value
	var mu sync.Mutex
	perWindow := map[int64]int64{}
	var wg sync.WaitGroup
	for _, a := range nodes {
		u := url(a)
		for range *conc {
			wg.Go(func() {
				local := map[int64]int64{}
				for !stop.Load() {
					resp, err := client.Post(u, "application/json", bytes.NewReader(body))
					var b []byte
					if err == nil {
						b, err = io.ReadAll(resp.Body)
						resp.Body.Close()
					}
					now := time.Now()
					if !measuring.Load() {
						continue
					}
					total.Add(1)
					w, ok, err := decodeGlobal(*target, resp, b, err, now, *period)
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					if ok {
						local[w]++
					}
				}
				mu.Lock()
				for w, n := range local {
					perWindow[w] += n
				}
				mu.Unlock()
			})
		}
	}
	time.Sleep(*warm)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(*dur)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()

	ws := make([]int64, 0, len(perWindow))
	for w := range perWindow {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	var admitted, most int64
	var list []string
	for i, w := range ws {
		admitted += perWindow[w]
		list = append(list, strconv.FormatInt(perWindow[w], 10))
		if i > 0 && i < len(ws)-1 { // the first and last are partial
			most = max(most, perWindow[w])
		}
	}
	n := total.Load()
	mean := float64(admitted) * float64(*period) / float64(elapsed)
	fmt.Printf("target=%s nodes=%d c=%d checks=%d checks_per_s=%.0f admitted=%d per_period=%.0f mean_overshoot_pct=%.1f windows=%d max_window=%d overshoot_pct=%.1f errors=%d per_window=%s\n",
		*target, len(nodes), *conc, n, float64(n-errs.Load())/elapsed.Seconds(), admitted, mean, 100*max(mean-float64(*limit), 0)/float64(*limit),
		max(len(ws)-2, 0), most, 100*float64(max(most-*limit, 0))/float64(*limit), errs.Load(), strings.Join(list, ","))
	if e := firstErr.Load(); e != nil {
		fmt.Println("first error:", e)
	}
	return nil
}

// decodeGlobal reads one answer: whether it admitted the hit and the
// window it counts in.
func decodeGlobal(target string, resp *http.Response, b []byte, err error, now time.Time, period time.Duration) (int64, bool, error) {
	if err != nil {
		return 0, false, err
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return 0, false, nil
	case resp.StatusCode != http.StatusOK:
		return 0, false, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	if target == "counterd-http" {
		return now.UnixNano() / int64(period), true, nil
	}
	var g struct {
		Responses []struct {
			Status    string `json:"status"`
			ResetTime string `json:"reset_time"`
			Error     string `json:"error"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(b, &g); err != nil || len(g.Responses) != 1 {
		return 0, false, fmt.Errorf("gubernator answer %.200s: %v", b, err)
	}
	r := g.Responses[0]
	if r.Error != "" {
		return 0, false, fmt.Errorf("gubernator: %s", r.Error)
	}
	if r.Status == "OVER_LIMIT" {
		return 0, false, nil
	}
	reset, err := strconv.ParseInt(r.ResetTime, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("gubernator reset_time %q: %v", r.ResetTime, err)
	}
	// Peers learn the owner's reset_time late; round to 10 ms so that one
	// bucket's answers count together.
	return reset / 10, true, nil
}
