// Package pipelinetest holds what the event pipeline's tests and
// benchmarks in several packages share.
package pipelinetest

import (
	"context"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/pipeline/stream"
)

// ImpressionRules is the rules file of the end-to-end pipeline tests and
// benchmarks (cmd/counterd) and of the consumer's disk benchmark: seed
// 003's impressions — views per post (bots excluded), unique viewers per
// post with daily rollups, and views per country as hash fields.
const ImpressionRules = `dedupe: 24h
rules:
  - name: views
    filter: event.type == "impression" && !event.?bot.orValue(false)
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "impression"
    counter: '"viewers:" + event.post'
    pfadd: event.user
    rollup: {key: viewers, unique_days: 400d}
  - name: countries
    filter: event.type == "impression"
    counter: '"countries:" + event.post'
    hadd: {field: event.country}
`

// CostRules is the rules file of the consume-cost benchmarks (issue 25's
// four rules; internal/pipeline BenchmarkConsumeCost and cmd/counterd
// BenchmarkClusterConsumeCost): views per post (add), unique viewers per
// post (pfadd, daily uniques), likes per post with hourly rollups, and a
// per-user window of the last hour by minute.
const CostRules = `dedupe: 24h
rules:
  - name: views
    filter: event.type == "impression"
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "impression"
    counter: '"viewers:" + event.post'
    pfadd: event.user
    rollup: {key: viewers, unique_days: 400d}
  - name: likes
    filter: event.type == "like"
    counter: '"likes:" + event.post'
    add: "1"
    rollup: {key: likes, hour: 30d}
  - name: user-recent
    counter: '"recent:" + event.user'
    window: {granularity: 1m, span: 1h, by: "1"}
`

// CostEvents returns n events for CostRules in stream messages of 1000:
// 1000 posts, 50,000 users, one in ten a like, times spread over the last
// 50 minutes; and how many are impressions.
func CostEvents(n int) (msgs [][]byte, impressions int) {
	now := time.Now().UnixMilli()
	var m []byte
	for i := range n {
		typ := "impression"
		if i%10 == 9 {
			typ = "like"
		} else {
			impressions++
		}
		ts := now - int64((i*7919)%3000)*1000
		m = fmt.Appendf(m, `{"id":"c%d","type":%q,"ts":%d,"post":"p%d","user":"u%d","country":"c%d"}`, i, typ, ts, i%1000, (i*31)%50000, i%5)
		if (i+1)%1000 == 0 || i == n-1 {
			msgs = append(msgs, m)
			m = nil
		} else {
			m = append(m, '\n')
		}
	}
	return msgs, impressions
}

// Publish appends msgs to the JetStream stream of cfg, 64 messages per
// Append.
func Publish(ctx context.Context, cfg stream.JetStreamConfig, msgs [][]byte) error {
	prod, err := stream.OpenJetStream(ctx, cfg)
	if err != nil {
		return err
	}
	defer prod.Close()
	for i := 0; i < len(msgs); i += 64 {
		if err := prod.Append(ctx, msgs[i:min(i+64, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
}
