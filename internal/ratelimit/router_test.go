package ratelimit

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

var all3 = []int{0, 1, 2}

// A forwarded answer decodes to the statuses the owner decided, rounded up
// to milliseconds.
func TestForwardAnswerRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	dur := func() time.Duration { return time.Duration(rnd.Int64N(int64(48 * time.Hour))) }
	for range 300 {
		n := 1 + rnd.IntN(MaxHits)
		hits := make([]Hit, n)
		sts := make([]Status, n)
		for i := range sts {
			hits[i] = Hit{Key: "k", Limit: Limit{Algorithm: TokenBucket, Limit: 1 + rnd.Int64N(MaxLimit), Period: time.Second}, Cost: rnd.Int64N(3)}
			sts[i] = Status{Allowed: rnd.IntN(2) == 0, Limit: hits[i].Limit.Limit, Remaining: rnd.Int64N(MaxLimit), Reset: dur(), RetryAfter: dur(), Delay: dur()}
		}
		agg := sts[rnd.IntN(n)]
		raw, err := json.Marshal(newCheckAnswer("k", hits, sts, agg))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]Status, n)
		got, err := decodeAnswer(raw, out, n)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range append(sts, agg) {
			g := got
			if i < n {
				g = out[i]
			}
			if g.Allowed != want.Allowed || g.Limit != want.Limit || g.Remaining != want.Remaining ||
				!roundedUp(g.Reset, want.Reset) || !roundedUp(g.RetryAfter, want.RetryAfter) || !roundedUp(g.Delay, want.Delay) {
				t.Fatalf("status %d: got %+v, want %+v rounded up to ms", i, g, want)
			}
		}
	}
}

func roundedUp(got, want time.Duration) bool {
	return got >= want && got-want < time.Millisecond && got%time.Millisecond == 0
}

// FuzzForwardAnswer: any answer either fails to decode or gives n statuses
// with figures that are not negative.
func FuzzForwardAnswer(f *testing.F) {
	f.Add([]byte(`{"status":"ok","allowed":true,"limit":5,"remaining":4,"reset_ms":1000,"limits":[{"allowed":true,"limit":5,"remaining":4,"reset_ms":1000}]}`), 1)
	f.Add([]byte(`{"allowed":false,"retry_after_ms":99999999999999999,"limits":[{},{}]}`), 2)
	f.Add([]byte(`{"limits":[{"remaining":-1}]}`), 1)
	f.Fuzz(func(t *testing.T, raw []byte, n int) {
		if n < 0 || n > MaxHits {
			return
		}
		out := make([]Status, n)
		s, err := decodeAnswer(raw, out, n)
		if err != nil {
			return
		}
		for _, st := range append(out, s) {
			if st.Limit < 0 || st.Remaining < 0 || st.Reset < 0 || st.RetryAfter < 0 || st.Delay < 0 {
				t.Fatalf("negative figure decoded from %q: %+v", raw, st)
			}
		}
	})
}
