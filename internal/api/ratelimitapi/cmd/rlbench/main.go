// Command rlbench serves and load-tests rate limit checks, for
// scripts/bench-ratelimit.sh.
//
//	rlbench serve [-http ADDR] [-grpc ADDR]
//	    runs a ratelimit.Limiter behind its HTTP API (POST /ratelimit/check)
//	    and Envoy's rate limit service over gRPC, as counterd wires them;
//	    prints "http=ADDR grpc=ADDR" and serves until SIGINT/SIGTERM.
//	rlbench load -target T -addr ADDR [-c 64] [-d 10s] [-warmup 1s] [-keys 10000]
//	    drives checks at ADDR from c workers, each waiting for its answer,
//	    and prints one line: checks/s, p50, p99, p99.9, errors, allowed.
//	    T is counterd-http, counterd-grpc, gubernator-http or gubernator-grpc.
//	rlbench global -target T -addrs A,B,C [-c 16] [-d 10s] [-limit 1000] [-period 1s]
//	    drives one limit from every node at once and prints checks/s and
//	    the admissions per window (global.go).
//	rlbench freeport
//	    prints a free loopback TCP port.
//
// Every check is one hit of cost 1 on one of -keys keys (round robin per
// worker) under a token bucket of -limit per -period, high enough that
// every check is allowed: the load measures the checking path, not
// rejections. gubernator is spoken to over its public API only: HTTP
// POST /v1/GetRateLimits, and gRPC pb.gubernator.V1/GetRateLimits
// encoded here from its published .proto field numbers (no gubernator
// code is imported).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rlbench serve|load|global|freeport [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "global":
		err = global(os.Args[2:])
	case "freeport":
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
			fmt.Println(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlbench:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	httpAddr := fs.String("http", "127.0.0.1:0", "HTTP listen address")
	grpcAddr := fs.String("grpc", "127.0.0.1:0", "gRPC listen address")
	fs.Parse(args)
	l, err := ratelimit.New(ratelimit.Config{})
	if err != nil {
		return err
	}
	defer l.Close()
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/ratelimit/", ratelimitapi.NewHTTPHandler(l, ratelimitapi.HTTPOptions{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	gs := grpc.NewServer()
	ratelimitapi.RegisterEnvoy(gs, l, ratelimitapi.EnvoyOptions{OverrideAlgorithm: ratelimit.TokenBucket})
	go hs.Serve(hl)
	go gs.Serve(gl)
	fmt.Printf("http=%s grpc=%s\n", hl.Addr(), gl.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	gs.Stop()
	return hs.Close()
}

// checker performs one check; worker-local state lives in the closure.
type checker func(ctx context.Context, key string) (allowed bool, err error)

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	target := fs.String("target", "", "counterd-http, counterd-grpc, gubernator-http or gubernator-grpc")
	addr := fs.String("addr", "", "host:port of the target")
	conc := fs.Int("c", 64, "concurrent workers (each waits for its answer)")
	dur := fs.Duration("d", 10*time.Second, "measured duration")
	warm := fs.Duration("warmup", time.Second, "unmeasured warm-up")
	nkeys := fs.Int("keys", 10000, "distinct keys")
	limit := fs.Int64("limit", 1_000_000_000, "token bucket limit per period (high: every check passes)")
	period := fs.Duration("period", time.Minute, "token bucket period (whole minutes for the gRPC targets)")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("load: -addr is required")
	}
	newChecker, cleanup, err := dial(*target, *addr, *conc, *limit, *period)
	if err != nil {
		return err
	}
	defer cleanup()

	var measuring, stop atomic.Bool
	lat := make([][]int64, *conc)
	var errs, allowed, total atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	ctx := context.Background()
	for w := range *conc {
		check := newChecker()
		wg.Go(func() {
			i := w * 7919
			for !stop.Load() {
				key := "bench:" + strconv.Itoa(i%*nkeys)
				i++
				t := time.Now()
				ok, err := check(ctx, key)
				d := time.Since(t)
				if !measuring.Load() {
					continue
				}
				total.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if ok {
					allowed.Add(1)
				}
				lat[w] = append(lat[w], int64(d))
			}
		})
	}
	time.Sleep(*warm)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(*dur)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()

	var all []int64
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	q := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return time.Duration(all[min(len(all)-1, int(p*float64(len(all))))])
	}
	n := total.Load()
	fmt.Printf("target=%s c=%d keys=%d checks=%d checks_per_s=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f errors=%d allowed_pct=%.2f\n",
		*target, *conc, *nkeys, n, float64(n-errs.Load())/elapsed.Seconds(),
		us(q(0.50)), us(q(0.99)), us(q(0.999)), errs.Load(), 100*float64(allowed.Load())/float64(max(1, n-errs.Load())))
	if e := firstErr.Load(); e != nil {
		fmt.Fprintln(os.Stderr, "first error:", e)
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// dial connects to the target and returns a factory of per-worker
// checkers.
func dial(target, addr string, conc int, limit int64, period time.Duration) (func() checker, func(), error) {
	switch target {
	case "counterd-http", "gubernator-http":
		tr := &http.Transport{MaxIdleConns: conc, MaxIdleConnsPerHost: conc, DisableCompression: true}
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		url, body := "http://"+addr+"/ratelimit/check", counterdBody
		if target == "gubernator-http" {
			url, body = "http://"+addr+"/v1/GetRateLimits", gubernatorBody
		}
		return func() checker {
			var buf bytes.Buffer
			return func(ctx context.Context, key string) (bool, error) {
				buf.Reset()
				body(&buf, key, limit, period)
				resp, err := client.Post(url, "application/json", bytes.NewReader(buf.Bytes()))
				if err != nil {
					return false, err
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return false, err
				}
				switch {
				case resp.StatusCode == http.StatusTooManyRequests:
					return false, nil
				case resp.StatusCode != http.StatusOK:
					return false, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
				case target == "gubernator-http":
					if bytes.Contains(b, []byte(`"OVER_LIMIT"`)) {
						return false, nil
					}
					if bytes.Contains(b, []byte(`"error":"`)) && !bytes.Contains(b, []byte(`"error":""`)) {
						return false, fmt.Errorf("gubernator: %.200s", b)
					}
				}
				return true, nil
			}
		}, tr.CloseIdleConnections, nil
	case "counterd-grpc", "gubernator-grpc":
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		cleanup := func() { conn.Close() }
		if target == "counterd-grpc" {
			unit, ok := map[time.Duration]typev3.RateLimitUnit{time.Second: typev3.RateLimitUnit_SECOND, time.Minute: typev3.RateLimitUnit_MINUTE,
				time.Hour: typev3.RateLimitUnit_HOUR, 24 * time.Hour: typev3.RateLimitUnit_DAY}[period]
			if !ok || limit > 1<<32-1 {
				return nil, nil, errors.New("counterd-grpc: -period must be 1s, 1m, 1h or 24h and -limit fit 32 bits")
			}
			client := rlsv3.NewRateLimitServiceClient(conn)
			return func() checker {
				return func(ctx context.Context, key string) (bool, error) {
					resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
						Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "key", Value: key}},
						Limit:   &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(limit), Unit: unit},
					}}})
					if err != nil {
						return false, err
					}
					return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
				}
			}, cleanup, nil
		}
		return func() checker {
			var req []byte
			return func(ctx context.Context, key string) (bool, error) {
				req = gubernatorProto(req[:0], key, limit, period)
				var resp rawMessage
				if err := conn.Invoke(ctx, "/pb.gubernator.V1/GetRateLimits", rawMessage(req), &resp, grpc.ForceCodec(rawCodec{})); err != nil {
					return false, err
				}
				return parseGubernatorResp(resp)
			}
		}, cleanup, nil
	}
	return nil, nil, fmt.Errorf("unknown -target %q", target)
}

func counterdBody(b *bytes.Buffer, key string, limit int64, period time.Duration) {
	fmt.Fprintf(b, `{"key":%q,"limits":[{"algorithm":"token_bucket","limit":%d,"period_ms":%d}]}`, key, limit, period.Milliseconds())
}

// gubernatorBody: one RateLimitReq, TOKEN_BUCKET (0), NO_BATCHING (1).
func gubernatorBody(b *bytes.Buffer, key string, limit int64, period time.Duration) {
	fmt.Fprintf(b, `{"requests":[{"name":"bench","unique_key":%q,"hits":1,"limit":%d,"duration":%d,"algorithm":0,"behavior":1}]}`, key, limit, period.Milliseconds())
}

// gubernatorProto encodes GetRateLimitsReq{requests: [RateLimitReq{name=1,
// unique_key=2, hits=3, limit=4, duration=5, algorithm=6, behavior=7}]}.
func gubernatorProto(b []byte, key string, limit int64, period time.Duration) []byte {
	var r []byte
	r = protowire.AppendTag(r, 1, protowire.BytesType)
	r = protowire.AppendString(r, "bench")
	r = protowire.AppendTag(r, 2, protowire.BytesType)
	r = protowire.AppendString(r, key)
	r = protowire.AppendTag(r, 3, protowire.VarintType)
	r = protowire.AppendVarint(r, 1)
	r = protowire.AppendTag(r, 4, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(limit))
	r = protowire.AppendTag(r, 5, protowire.VarintType)
	r = protowire.AppendVarint(r, uint64(period.Milliseconds()))
	r = protowire.AppendTag(r, 7, protowire.VarintType)
	r = protowire.AppendVarint(r, 1) // NO_BATCHING
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, r)
}

// parseGubernatorResp reads GetRateLimitsResp{responses: [RateLimitResp{
// status=1 (0 UNDER_LIMIT, 1 OVER_LIMIT), ..., error=5}]}.
func parseGubernatorResp(b []byte) (bool, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		over := false
		for len(m) > 0 {
			f, t, k := protowire.ConsumeTag(m)
			if k < 0 {
				return false, protowire.ParseError(k)
			}
			m = m[k:]
			switch {
			case f == 1 && t == protowire.VarintType:
				v, k := protowire.ConsumeVarint(m)
				if k < 0 {
					return false, protowire.ParseError(k)
				}
				over, m = v == 1, m[k:]
			case f == 5 && t == protowire.BytesType:
				s, k := protowire.ConsumeString(m)
				if k < 0 {
					return false, protowire.ParseError(k)
				}
				if s != "" {
					return false, errors.New("gubernator: " + s)
				}
				m = m[k:]
			default:
				if k = protowire.ConsumeFieldValue(f, t, m); k < 0 {
					return false, protowire.ParseError(k)
				}
				m = m[k:]
			}
		}
		return !over, nil
	}
	return false, errors.New("gubernator: empty response")
}

// rawMessage and rawCodec pass already-encoded protobuf through gRPC.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(rawMessage); ok {
		return m, nil
	}
	return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}
