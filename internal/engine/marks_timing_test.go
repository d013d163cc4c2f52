package engine

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/rollup"
)

// BenchmarkApplyMarkedBatch: the engine's share of a consumer with
// BenchmarkConsumeCost's four rules, without the consumer: batches of
// 8192 events as the consumer builds them (an add to the event's user's
// window of an hour by minute, 50,000 users; per post, 1000 of them, an
// add to its views, a pfadd of its viewers with daily uniques and, for
// one event in ten, an add to its likes with hourly rollups; ops of one
// counter and bucket merged), each applied by ApplyMarked with the
// events' marks; a flush every 8 batches (untimed), as the consumer's
// engine flushes. cpu-ns/event is the process's CPU (getrusage) while
// ApplyMarked runs, per event.
func BenchmarkApplyMarkedBatch(b *testing.B) {
	cfg := DefaultConfig()
	cfg.InMemory = true
	cfg.FlushInterval = time.Hour // only the benchmark flushes
	e := mustOpen(b, cfg)
	defer e.Close()
	if err := e.SetRollup("viewers", rollup.Spec{UniqueDays: 400 * 24 * time.Hour}); err != nil {
		b.Fatal(err)
	}
	if err := e.SetRollup("likes", rollup.Spec{Hour: 30 * 24 * time.Hour}); err != nil {
		b.Fatal(err)
	}
	const events, users, posts = 8192, 50_000, 1000
	spec := counter.WindowSpec{Granularity: time.Minute, Span: time.Hour}
	rng := rand.New(rand.NewPCG(1, 2))
	seq := 0
	var marks []string
	// batch returns the next batch's ops and marks.
	batch := func() []contract.Op {
		now := time.Now()
		var ops []contract.Op
		type key struct {
			id string
			at int64
		}
		merged := map[key]int{}
		add := func(op contract.Op, bucket int64) {
			k := key{op.ID, bucket}
			if j, ok := merged[k]; ok {
				ops[j].Delta += op.Delta
				ops[j].Items = append(ops[j].Items, op.Items...)
				return
			}
			merged[k] = len(ops)
			ops = append(ops, op)
		}
		marks = marks[:0]
		for range events {
			i := seq
			seq++
			at := now.Add(-time.Duration((i*7919)%3000) * time.Second).UnixNano()
			post, user := "p"+strconv.Itoa(i%posts), "u"+strconv.Itoa((i*31)%users)
			if i%10 == 9 {
				add(contract.Op{Type: contract.OpAdd, ID: "likes:" + post, Delta: 1, At: at}, at/int64(time.Hour))
			} else {
				add(contract.Op{Type: contract.OpAdd, ID: "views:" + post, Delta: 1}, 0)
				add(contract.Op{Type: contract.OpPFAdd, ID: "viewers:" + post, Items: [][]byte{[]byte(user)}, At: at}, at/int64(24*time.Hour))
			}
			add(contract.Op{Type: contract.OpAdd, ID: "recent:" + user, Kind: contract.KindWindow, Window: spec, Delta: 1, At: at}, int64(rng.Uint64()))
			marks = append(marks, "ev"+strconv.Itoa(i))
		}
		return ops
	}
	apply := func(ops []contract.Op) {
		if err := e.ApplyMarked(bg, ops, marks, 24*time.Hour, contract.WriteOptions{Durability: contract.Async}); err != nil {
			b.Fatal(err)
		}
	}
	for range users / events * 2 { // every counter created
		apply(batch())
	}
	if err := e.flushOnce(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for n := range b.N {
		b.StopTimer()
		ops := batch()
		if n%8 == 7 {
			if err := e.flushOnce(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		cpu0 := processCPU()
		apply(ops)
		cpu += processCPU() - cpu0
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*events), "cpu-ns/event")
}
