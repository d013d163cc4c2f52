package ratelimitapi

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/ratelimit"
)

type decisionsAnswer struct {
	Decisions []ratelimit.Decision `json:"decisions"`
	Total     uint64               `json:"total"`
	Capacity  int                  `json:"capacity"`
	Error     struct{ Code string }
}

// TestHTTPDecisions: checks through HTTP and RL.CHECK show up in GET
// /ratelimit/decisions, newest first, only the last capacity of them.
func TestHTTPDecisions(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, clk.Now)
	rec := ratelimit.NewRecorder(l, 3)
	h := NewHTTPHandler(rec, HTTPOptions{Recent: rec})

	body := `{"key":"user:1","limits":[{"name":"two","algorithm":"fixed_window","limit":2,"period":"1s"}]}`
	for i := range 3 {
		res, _ := do(t, h, "POST", "/ratelimit/check", body)
		if want := []int{200, 200, 429}[i]; res.Code != want {
			t.Fatalf("check %d: status %d, want %d", i, res.Code, want)
		}
	}
	if _, err := rec.CheckArgs([][]byte{[]byte("resp:1"), []byte("5"), []byte("1000")}); err != nil {
		t.Fatal(err)
	}
	// An invalid check is no decision.
	if res, _ := do(t, h, "POST", "/ratelimit/check", `{"key":""}`); res.Code != 400 {
		t.Fatalf("invalid check: status %d", res.Code)
	}

	res, _ := do(t, h, "GET", "/ratelimit/decisions", "")
	var a decisionsAnswer
	if err := json.Unmarshal(res.Body.Bytes(), &a); err != nil || res.Code != 200 {
		t.Fatalf("decisions: %d %s %v", res.Code, res.Body, err)
	}
	if a.Total != 4 || a.Capacity != 3 || len(a.Decisions) != 3 {
		t.Fatalf("total %d capacity %d, %d decisions; want 4, 3, 3: %s", a.Total, a.Capacity, len(a.Decisions), res.Body)
	}
	want := []struct {
		seq     uint64
		key     string
		allowed bool
		policy  string
		remain  int64
	}{
		{4, "resp:1", true, "sliding_window-5-1s", 4},
		{3, "user:1", false, "two", 0},
		{2, "user:1", true, "two", 0},
	}
	for i, w := range want {
		d := a.Decisions[i]
		if d.Seq != w.seq || d.Key != w.key || d.Allowed != w.allowed || d.Policy != w.policy || d.Remaining != w.remain || d.Limits != 1 || d.Cost != 1 {
			t.Errorf("decision %d: %+v, want %+v", i, d, w)
		}
		if ts, err := time.Parse(time.RFC3339Nano, d.Time); err != nil || !ts.Equal(clk.Now()) {
			t.Errorf("decision %d: time %q, want %v", i, d.Time, clk.Now())
		}
	}
	if a.Decisions[1].RetryAfterMS <= 0 {
		t.Errorf("denied decision has retry_after_ms %d", a.Decisions[1].RetryAfterMS)
	}

	res, _ = do(t, h, "GET", "/ratelimit/decisions?limit=1", "")
	a = decisionsAnswer{}
	_ = json.Unmarshal(res.Body.Bytes(), &a)
	if len(a.Decisions) != 1 || a.Decisions[0].Seq != 4 {
		t.Errorf("limit=1: %s", res.Body)
	}
	for _, q := range []string{"0", "-1", "x"} {
		res, ans := do(t, h, "GET", "/ratelimit/decisions?limit="+q, "")
		if res.Code != 400 || ans.Error.Code != "invalid_argument" {
			t.Errorf("limit=%s: %d %s", q, res.Code, res.Body)
		}
	}
	if res, _ := do(t, h, "POST", "/ratelimit/decisions", ""); res.Code != 405 {
		t.Errorf("POST: status %d", res.Code)
	}

	// Without a Recorder the route answers an empty list.
	res, _ = do(t, NewHTTPHandler(l, HTTPOptions{}), "GET", "/ratelimit/decisions", "")
	if res.Code != 200 || res.Body.String() != `{"decisions":[],"total":0,"capacity":0}`+"\n" {
		t.Errorf("no recorder: %d %s", res.Code, res.Body)
	}
}

// FuzzHTTPDecisions: whatever a check's body and the decisions query, the
// newest decision is the last check that was decided (its key and
// outcome), an invalid check records nothing, and the query answers 200
// with at most the asked number of decisions or 400 invalid_argument.
func FuzzHTTPDecisions(f *testing.F) {
	f.Add(`{"key":"a","limits":[{"algorithm":"fixed_window","limit":1,"period":"1s"}]}`, "1")
	f.Add(`{"key":"p:1"}`, "")
	f.Add(`{"key":""}`, "0")
	f.Add(`{"key":"b","limits":[{"limit":2,"period":"1m"},{"key":"c","limit":1,"period":"1s"}]}`, "99999999999999999999")
	l := newLimiter(f, newFakeClock().Now, ratelimit.Policy{Name: "p", Match: "p:*", Algorithm: ratelimit.FixedWindow, Limit: 3, Period: time.Second})
	rec := ratelimit.NewRecorder(l, 8)
	h := NewHTTPHandler(rec, HTTPOptions{Recent: rec})
	f.Fuzz(func(t *testing.T, body, limit string) {
		_, before := rec.Recent(1)
		res, ans := do(t, h, "POST", "/ratelimit/check", body)
		got, total := rec.Recent(1)
		switch res.Code {
		case 200, 429:
			// The decision names the first key charged: the first
			// limit's own key when it has one.
			var req struct {
				Limits []struct{ Key string } `json:"limits"`
			}
			_ = json.Unmarshal([]byte(body), &req)
			key := ans.Key
			if len(req.Limits) > 0 && req.Limits[0].Key != "" {
				key = req.Limits[0].Key
			}
			if total != before+1 || len(got) != 1 || got[0].Key != key || got[0].Allowed != ans.Allowed || got[0].Remaining != ans.Remaining {
				t.Fatalf("check %d %s: newest decision %+v (total %d, was %d)", res.Code, res.Body, got, total, before)
			}
		default:
			if total != before {
				t.Fatalf("check %d %s recorded a decision", res.Code, res.Body)
			}
		}
		req := httptest.NewRequest("GET", "/ratelimit/decisions?limit="+url.QueryEscape(limit), nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var a decisionsAnswer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatalf("answer %q: %v", w.Body, err)
		}
		n, err := strconv.Atoi(limit)
		switch {
		case limit == "":
			if w.Code != 200 || len(a.Decisions) != int(min(total, 8)) {
				t.Fatalf("no limit: %d, %d decisions of %d", w.Code, len(a.Decisions), total)
			}
		case err != nil || n < 1:
			if w.Code != 400 || a.Error.Code != "invalid_argument" {
				t.Fatalf("limit %q: %d %s", limit, w.Code, w.Body)
			}
		default:
			if w.Code != 200 || len(a.Decisions) > n || len(a.Decisions) > 8 {
				t.Fatalf("limit %q: %d, %d decisions", limit, w.Code, len(a.Decisions))
			}
		}
	})
}
