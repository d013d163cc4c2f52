package resp_test

import (
	"bufio"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/counterd/counterd/internal/api/resp"
	"github.com/counterd/counterd/internal/shed"
)

// benchPipeline sends b.N commands in pipelines of depth and reads the
// replies: the server's per-command cost with syscalls amortized.
func benchPipeline(b *testing.B, opts resp.Options, depth int, mk func(i int) string) {
	ts := start(b, opts)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReaderSize(c, 64<<10)
	batch := make([]byte, 0, depth*64)
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(depth, b.N-done)
		batch = batch[:0]
		for i := 0; i < n; i++ {
			batch = append(batch, mk(done+i)...)
		}
		if _, err := c.Write(batch); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i++ {
			line, err := rd.ReadSlice('\n')
			if err != nil {
				b.Fatal(err)
			}
			if line[0] == '-' {
				b.Fatalf("error reply %q", line)
			}
			if line[0] == '$' && line[1] != '-' {
				if _, err := rd.ReadSlice('\n'); err != nil {
					b.Fatal(err)
				}
			}
		}
		done += n
	}
}

var (
	incrCmd = cmd("INCR", "bench:counter")
	getCmd  = cmd("GET", "bench:counter")
)

func BenchmarkPipelinedINCR(b *testing.B) {
	benchPipeline(b, resp.Options{}, 100, func(int) string { return incrCmd })
}

// BenchmarkPipelinedINCRShed: the same with the overload limiter on (one
// admission per batch).
func BenchmarkPipelinedINCRShed(b *testing.B) {
	benchPipeline(b, resp.Options{Admission: shed.NewFair(shed.FairConfig{})}, 100, func(int) string { return incrCmd })
}

func BenchmarkPipelinedINCRMetrics(b *testing.B) {
	benchPipeline(b, resp.Options{Registerer: prometheus.NewRegistry()}, 100, func(int) string { return incrCmd })
}

func BenchmarkPipelinedINCRRandomKeys(b *testing.B) {
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = cmd("INCR", fmt.Sprintf("bench:%06d", i))
	}
	benchPipeline(b, resp.Options{}, 100, func(i int) string { return keys[i%len(keys)] })
}

func BenchmarkPipelinedGET(b *testing.B) {
	benchPipeline(b, resp.Options{}, 100, func(int) string { return getCmd })
}

// BenchmarkParallelINCR is redis-benchmark -P 1: many connections, one
// command in flight each.
func BenchmarkParallelINCR(b *testing.B) {
	ts := start(b, resp.Options{})
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		rd := bufio.NewReader(c)
		key := cmd("INCR", fmt.Sprintf("bench:%d", n.Add(1)))
		for pb.Next() {
			if _, err := c.Write([]byte(key)); err != nil {
				b.Error(err)
				return
			}
			if _, err := rd.ReadSlice('\n'); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
