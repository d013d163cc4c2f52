package ratelimit

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func FuzzLoadPolicies(f *testing.F) {
	f.Add(examplePolicies)
	f.Add("policies:\n  - {name: a, match: '*', limit: 1, period: 1s, cost: 1}\n")
	f.Add("policies: []\n")
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := LoadPolicies(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, p := range ps {
			if err := p.Validate(); err != nil {
				t.Fatalf("loaded an invalid policy %+v: %v", p, err)
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var q Policy
			if err := json.Unmarshal(b, &q); err != nil || q != p {
				t.Fatalf("JSON round trip of %+v: %+v, %v", p, q, err)
			}
		}
	})
}

// FuzzAlgorithms drives every algorithm with fuzzed limits, gaps and
// costs and compares each decision with the reference models of
// algorithm_test.go, and each status's RetryAfter and Reset with the
// future it promises.
func FuzzAlgorithms(f *testing.F) {
	f.Add([]byte{0, 5, 10, 0, 1, 3, 2, 0, 0, 9, 1})
	f.Add([]byte{1, 7, 3, 0, 200, 1, 0, 1, 0, 2, 255, 3})
	f.Add([]byte{4, 2, 50, 9, 0, 1, 0, 1, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 4 {
			return
		}
		alg := Algorithm(b[0]%5 + 1)
		lim := Limit{Algorithm: alg, Limit: int64(b[1]%20) + 1, Period: time.Duration(int64(b[2])+1) * time.Millisecond}
		if alg == TokenBucket || alg == LeakyBucket {
			lim.Burst = int64(b[3] % 30)
		}
		if lim.Validate() != nil {
			return
		}
		m := newSim(t, lim)
		p := int64(lim.Period)
		var ref refModel
		switch alg {
		case FixedWindow:
			ref = &refFixed{lim: lim.Limit, period: p, counts: map[int64]int64{}}
		case SlidingWindow:
			ref = &refSliding{lim: lim.Limit, period: p, counts: map[int64]int64{}}
		case SlidingLog:
			ref = &refLog{lim: lim.Limit, period: p}
		default:
			ref = &refBucket{t: m.sp.t, tol: m.sp.tol}
		}
		now := t0.UnixNano()
		r := bytes.NewReader(b[4:])
		for {
			var step [2]byte
			if _, err := r.Read(step[:]); err != nil {
				return
			}
			var gap uint16
			binary.Read(r, binary.LittleEndian, &gap)
			now += int64(step[0]) * int64(gap) * p / 4096
			cost := int64(step[1]) % (m.sp.capacity() + 1)
			pre := m.clone()
			s := m.check(now, cost)
			ok, rem := ref.check(now, cost)
			if s.Allowed != ok || s.Remaining != rem {
				t.Fatalf("%v at %d cost %d: got %v/%d, reference %v/%d", lim, now-t0.UnixNano(), cost, s.Allowed, s.Remaining, ok, rem)
			}
			checkPromises(t, pre, m, now, cost, s)
		}
	})
}
