package ratelimitapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/httpjson"
	"github.com/counterd/counterd/internal/ratelimit"
)

var checkBodySeeds = []string{
	`{"key":"account:12345","limits":[{"name":"requests_per_sec","algorithm":"token_bucket","limit":1000000000,"period_ms":60000}]}`,
	`{"key":"a","limits":[{"algorithm":"fixed_window","limit":2,"period":"1s"}]}`,
	`{"key":"p:1","cost":0}`,
	` { "key" : "p:1" , "policy":"p", "policies":["a","b"], "limits":[{"limit":5,"period_ms":100,"algorithm":"token_bucket","burst":7,"cost":-3,"key":"k2","name":"n"}] } `,
	`{"key":"a","policies":[],"limits":[]}`,
	`{"Key":"a"}`, `{"key":"a","key":"b"}`, `{"key":"a\u0041"}`, `{"key":null}`, `{"cost":1.5}`, `{"cost":1e3}`,
	`{"cost":"1"}`, `{"cost":01}`, `{"cost":-}`, `{"cost":99999999999999999999}`, `{"cost":-9223372036854775808}`,
	`{"key":"a"} x`, `{"key":"a"}{}`, `[]`, ``, `  `, `{`, `{"limits":[{"nope":1}]}`, `{"key":"é"}`, `{"key":1}`,
	`{"policies":["a",1]}`, `{"limits":{}}`, `{"limits":[1]}`, `{,}`, `{"key":"a",}`, `{"limits":[{},]}`,
}

// FuzzDecodeCheck checks that decodeCheck (fast path, then encoding/json)
// accepts and rejects exactly what httpapi.DecodeStrict does, with the
// same value or the same error message, and that whatever the fast
// decoder accepts encoding/json accepts with the same value.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range checkBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want ratelimit.CheckRequest
		werr := httpapi.DecodeStrict(b, &want)
		var fast ratelimit.CheckRequest
		if decodeCheckFast(b, &fast) {
			if werr != nil {
				t.Fatalf("fast decoder accepted %q, encoding/json: %v", b, werr)
			}
			if !reflect.DeepEqual(fast, want) {
				t.Fatalf("%q: fast decoder %#v, encoding/json %#v", b, fast, want)
			}
		}
		var got ratelimit.CheckRequest
		gerr := decodeCheck(b, &got)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%q: decodeCheck error %v, DecodeStrict error %v", b, gerr, werr)
		}
		if werr != nil {
			if gerr.Error() != werr.Error() {
				t.Fatalf("%q: decodeCheck error %q, DecodeStrict error %q", b, gerr, werr)
			}
			// Same classification (errors.Is of the sentinels).
			for _, s := range []error{ratelimit.ErrInvalidRequest, httpjson.ErrInvalidJSON} {
				if errors.Is(gerr, s) != errors.Is(werr, s) {
					t.Fatalf("%q: errors.Is(%v) differs: %v vs %v", b, s, gerr, werr)
				}
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeCheck %#v, DecodeStrict %#v", b, got, want)
		}
	})
}

// TestDecodeCheckFastPath checks that the common bodies take the fast
// path (else the fuzz test would pass with a decoder that declines all).
func TestDecodeCheckFastPath(t *testing.T) {
	for _, s := range checkBodySeeds[:5] {
		var req ratelimit.CheckRequest
		if !decodeCheckFast([]byte(s), &req) {
			t.Errorf("fast decoder declined %s", s)
		}
	}
}

// TestAppendCheckAnswer checks appendCheckAnswer against json.Marshal on
// arbitrary answers, strings included that need escaping.
func TestAppendCheckAnswer(t *testing.T) {
	str := rapid.OneOf(rapid.StringMatching(`[a-z0-9_:.]{0,12}`), rapid.String())
	i64 := rapid.OneOf(rapid.Int64(), rapid.Int64Range(-2, 2))
	rapid.Check(t, func(t *rapid.T) {
		a := ratelimit.CheckAnswer{Status: str.Draw(t, "status"), Allowed: rapid.Bool().Draw(t, "allowed"),
			Key: str.Draw(t, "key"), Limit: i64.Draw(t, "limit"), Remaining: i64.Draw(t, "remaining"),
			ResetMS: i64.Draw(t, "reset"), RetryAfterMS: i64.Draw(t, "retry"), DelayMS: i64.Draw(t, "delay")}
		if n := rapid.IntRange(-1, 4).Draw(t, "n"); n >= 0 {
			a.Limits = make([]ratelimit.LimitAnswer, n)
		}
		for i := range a.Limits {
			a.Limits[i] = ratelimit.LimitAnswer{Name: str.Draw(t, "name"), Algorithm: str.Draw(t, "alg"),
				Limit: i64.Draw(t, "l"), Period: str.Draw(t, "period"), Burst: i64.Draw(t, "burst"), Cost: i64.Draw(t, "cost"),
				Allowed: rapid.Bool().Draw(t, "a"), Remaining: i64.Draw(t, "r"), ResetMS: i64.Draw(t, "rs"),
				RetryAfterMS: i64.Draw(t, "ra"), DelayMS: i64.Draw(t, "d")}
		}
		want, err := json.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		pre := []byte("x")
		got := appendCheckAnswer(pre, &a)
		if string(got) != "x"+string(want) {
			t.Fatalf("appendCheckAnswer:\n got %s\nwant x%s", got, want)
		}
	})
}

func BenchmarkDecodeCheck(b *testing.B) {
	body := []byte(checkBodySeeds[0])
	b.ReportAllocs()
	for b.Loop() {
		var req ratelimit.CheckRequest
		if err := decodeCheck(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCheckEncodingJSON(b *testing.B) {
	body := []byte(checkBodySeeds[0])
	b.ReportAllocs()
	for b.Loop() {
		var req ratelimit.CheckRequest
		if err := httpapi.DecodeStrict(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHeaderAdder checks headerAdder against http.Header.Add, keys
// already present included.
func TestHeaderAdder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderXRateLimitLimit, HeaderXRateLimitRemain, HeaderXRateLimitReset, HeaderRetryAfter, "x-other"}
		want, got := http.Header{}, http.Header{}
		add := headerAdder(got)
		for i, n := 0, rapid.IntRange(0, 12).Draw(t, "n"); i < n; i++ {
			k := rapid.SampledFrom(names).Draw(t, "k")
			v := rapid.String().Draw(t, "v")
			if rapid.Bool().Draw(t, "direct") {
				want.Add(k, v)
				got.Add(k, v)
				continue
			}
			want.Add(k, v)
			add(k, v)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("headerAdder %v, Header.Add %v", got, want)
		}
	})
}
