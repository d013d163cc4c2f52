package rollup

import (
	"sort"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// memStore is an in-memory Store that keeps what the engine would write,
// encoded as the engine encodes it.
type memStore struct {
	chunks   map[Granularity]map[int64][]byte
	sketches map[skKey][]byte
	reads    int // Sketch calls
}

type skKey struct {
	unit  Granularity
	level int
	idx   int64
}

func newMemStore() *memStore {
	return &memStore{chunks: map[Granularity]map[int64][]byte{}, sketches: map[skKey][]byte{}}
}

func (m *memStore) Chunks(g Granularity, from, to int64, fn func(int64, []int64) error) error {
	var idxs []int64
	for idx := range m.chunks[g] {
		if idx >= from && idx <= to {
			idxs = append(idxs, idx)
		}
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		vals, err := DecodeChunk(g, idx, m.chunks[g][idx], nil)
		if err != nil {
			return err
		}
		if err := fn(idx, vals); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) Sketch(unit Granularity, level int, idx int64) (*counter.HLL, error) {
	m.reads++
	b, ok := m.sketches[skKey{unit, level, idx}]
	if !ok {
		return nil, nil
	}
	h := new(counter.HLL)
	return h, h.UnmarshalBinary(b)
}

// flush writes what s's TakeFlush returns, as the engine's flusher does,
// and commits it.
func (m *memStore) flush(t fataler, s *State, gen uint64) []byte {
	t.Helper()
	f, err := s.TakeFlush(gen)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Chunks {
		if m.chunks[c.G] == nil {
			m.chunks[c.G] = map[int64][]byte{}
		}
		m.chunks[c.G][c.Index] = MarshalChunk(c.Values)
	}
	for _, cs := range f.Sketches {
		ws, err := BlockUpdates(cs, func(level int, idx int64) (*counter.HLL, error) {
			return m.Sketch(cs.Unit, level, idx)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			b, err := w.Sketch.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			m.sketches[skKey{cs.Unit, w.Level, w.Index}] = b
		}
	}
	s.Committed(gen)
	return f.Head
}

// purge deletes what h allows.
func (m *memStore) purge(h Horizons) {
	for g, byIdx := range m.chunks {
		for idx := range byIdx {
			if idx < h.Chunks[g] {
				delete(byIdx, idx)
			}
		}
	}
	for k := range m.sketches {
		if k.idx < h.Sketches[sketchSlot(k.unit)][k.level] {
			delete(m.sketches, k)
		}
	}
}

// fataler is the part of testing.TB and *rapid.T the helpers need.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// t0 is 2024-01-31 22:00 UTC: a month, day and hour boundary come soon.
var t0 = time.Date(2024, 1, 31, 22, 0, 0, 0, time.UTC)

func ns(t time.Time) int64 { return t.UnixNano() }

func longSpec() *Spec {
	const day = 24 * time.Hour
	return &Spec{Minute: 4000 * day, Hour: 4000 * day, Day: 4000 * day, Month: 4000 * day, Precision: 10}
}

// mix is splitmix64's finalizer: distinct inputs give well-spread hashes.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
