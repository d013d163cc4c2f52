// Package pipelinetest holds what the event pipeline's tests and
// benchmarks in several packages share.
package pipelinetest

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
