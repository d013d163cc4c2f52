package resp

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestSlowlogModel: the slow log is the newest slowlog-max-len entries,
// newest first, whatever the sequence of entries and length changes
// (compared with a plain list).
func TestSlowlogModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l slowlog
		l.maxLen.Store(int64(rapid.IntRange(0, 8).Draw(t, "max")))
		c := &client{addr: "a"}
		var model []int64 // ids, oldest first
		next := int64(0)
		for i, n := 0, rapid.IntRange(0, 60).Draw(t, "ops"); i < n; i++ {
			if rapid.IntRange(0, 9).Draw(t, "op") == 0 {
				l.setMax(int64(rapid.IntRange(0, 8).Draw(t, "max")))
			} else {
				l.add(c, [][]byte{[]byte("PING")}, time.Millisecond)
				model = append(model, next)
				next++
			}
			max := int(l.maxLen.Load())
			if len(model) > max {
				model = model[len(model)-max:]
			}
			if got := l.len(); got != len(model) {
				t.Fatalf("len %d, want %d", got, len(model))
			}
			es := l.newest(-1)
			for j, e := range es {
				if want := model[len(model)-1-j]; e.id != want {
					t.Fatalf("entry %d has id %d, want %d", j, e.id, want)
				}
			}
			if k := rapid.IntRange(0, 10).Draw(t, "get"); len(l.newest(int64(k))) != min(k, len(model)) {
				t.Fatalf("SLOWLOG GET %d: %d entries of %d", k, len(l.newest(int64(k))), len(model))
			}
		}
	})
}
