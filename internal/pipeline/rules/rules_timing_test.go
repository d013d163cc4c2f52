package rules

import (
	"testing"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// BenchmarkEval: decoding one event from its stream form and evaluating
// the pipeline benchmark's three rules on it (add, PFADD, hash field).
func BenchmarkEval(b *testing.B) {
	s, err := Load("rules.yaml", []byte(`rules:
  - name: views
    filter: event.type == "impression" && !event.?bot.orValue(false)
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    filter: event.type == "impression"
    counter: '"viewers:" + event.post'
    pfadd: event.user
  - name: countries
    filter: event.type == "impression"
    counter: '"countries:" + event.post'
    hadd: {field: event.country}
`))
	if err != nil {
		b.Fatal(err)
	}
	raw := []byte(`{"id":"b123","type":"impression","ts":1764064800000,"post":"p123","user":"u123","country":"c3"}`)
	var hits []Hit
	b.ReportAllocs()
	for b.Loop() {
		e, err := event.Decode(raw, event.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if hits, err = s.Eval(NewInput(&e), hits[:0]); err != nil || len(hits) != 3 {
			b.Fatal(err, len(hits))
		}
	}
}
