package httploop

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// BenchmarkLoopRateLimitCheck runs POST /ratelimit/check (the body of
// scripts/bench-ratelimit-vs-gubernator.sh) through a loop's exchange:
// request filled from the parsed head, the rate-limit handler, the
// answer framed; no sockets. -benchmem shows the loop path's allocations.
func BenchmarkLoopRateLimitCheck(b *testing.B) {
	l, err := ratelimit.New(ratelimit.Config{EvictInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	handler := ratelimitapi.NewHTTPHandler(l, ratelimitapi.HTTPOptions{})
	body := `{"key":"account:12345","limits":[{"name":"requests_per_sec","algorithm":"token_bucket","limit":1000000000,"period_ms":60000}]}`
	req := []byte("POST /ratelimit/check HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body)
	var h head
	parse(req, 1<<20, &h)
	x := &exchange{ctx: context.Background(), remote: "127.0.0.1:1"}
	var out []byte
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		var panicked bool
		out, _, panicked = x.run(handler, &h, req, out[:0], false, now)
		if panicked || len(out) < 12 || string(out[9:12]) != "200" {
			b.Fatalf("answer %q", out)
		}
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
