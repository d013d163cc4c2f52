package engine

import "strings"

// MarkerCounterPrefix starts the id of every event marker counter: the
// counters the event pipeline created, one per applied event, before the
// engine kept dedupe marks (marks.go), and still creates on a backend
// without them (consumer.MarkerID).
const MarkerCounterPrefix = "_events:"

// isMarkerCounter reports whether id is that of a marker counter.
func isMarkerCounter[T string | []byte](id T) bool {
	return len(id) >= len(MarkerCounterPrefix) && strings.HasPrefix(string(id[:len(MarkerCounterPrefix)]), MarkerCounterPrefix)
}

// MayHaveMarkerCounters reports whether a counter whose id starts with
// MarkerCounterPrefix may exist: false when the index holds none (each
// shard counts the ids it holds that start so, deleted counters until
// the flusher reaps them). A consumer looks such counters up for every
// event only while it is true.
func (e *Engine) MayHaveMarkerCounters() bool {
	for i := range e.shards {
		if e.shards[i].markers.Load() > 0 {
			return true
		}
	}
	return false
}

func (l local) MayHaveMarkerCounters() bool { return l.e.MayHaveMarkerCounters() }
