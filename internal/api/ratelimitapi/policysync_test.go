package ratelimitapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/counterd/counterd/internal/api/ratelimitapi"
	"github.com/counterd/counterd/internal/ratelimit"
	"github.com/counterd/counterd/internal/ratelimit/policystoretest"
)

// flakyStore fails every call while down is set.
type flakyStore struct {
	ratelimit.MemoryPolicyStore
	down atomic.Bool
}

var errDown = errors.New("store down")

func (f *flakyStore) LoadPolicies(ctx context.Context) ([]ratelimit.Policy, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.MemoryPolicyStore.LoadPolicies(ctx)
}

func (f *flakyStore) PutPolicy(ctx context.Context, p ratelimit.Policy) error {
	if f.down.Load() {
		return errDown
	}
	return f.MemoryPolicyStore.PutPolicy(ctx, p)
}

func (f *flakyStore) DeletePolicy(ctx context.Context, name string) (bool, error) {
	if f.down.Load() {
		return false, errDown
	}
	return f.MemoryPolicyStore.DeletePolicy(ctx, name)
}

func (f *flakyStore) ReplacePolicies(ctx context.Context, ps []ratelimit.Policy) error {
	if f.down.Load() {
		return errDown
	}
	return f.MemoryPolicyStore.ReplacePolicies(ctx, ps)
}

// syncNode is one node: a Limiter following the store, and its HTTP API.
type syncNode struct {
	l *ratelimit.Limiter
	s *ratelimit.PolicySync
	h http.Handler
}

func newSyncNode(t *testing.T, st ratelimit.PolicyStore, iv time.Duration) *syncNode {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{EvictInterval: -1, Clock: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ratelimit.NewPolicySync(context.Background(), l, st, ratelimit.PolicySyncConfig{Interval: iv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); l.Close() })
	return &syncNode{l: l, s: s, h: ratelimitapi.NewHTTPHandler(l, ratelimitapi.HTTPOptions{Policies: s})}
}

func call(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec
}

func names(ps []ratelimit.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// A change through one node's HTTP API is in the store and on that node at
// once, and on the other node after its next reload.
func TestPolicySyncHTTPWritesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := new(ratelimit.MemoryPolicyStore)
		a, b := newSyncNode(t, st, time.Second), newSyncNode(t, st, time.Second)

		rec := call(t, a.h, "PUT", "/ratelimit/policies/api", `{"match":"api:*","algorithm":"fixed_window","limit":10,"period":"1m"}`)
		if rec.Code != 200 {
			t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
		}
		if ps, _ := st.LoadPolicies(t.Context()); !slices.Equal(names(ps), []string{"api"}) {
			t.Fatalf("store after PUT: %v", names(ps))
		}
		if _, ok := a.l.Policy("api"); !ok {
			t.Fatal("the writing node does not see its policy at once")
		}
		if _, ok := b.l.Policy("api"); ok {
			t.Fatal("the other node saw the policy before any reload")
		}
		time.Sleep(time.Second + time.Millisecond) // one reload interval (fake time)
		synctest.Wait()
		if p, ok := b.l.Policy("api"); !ok || p.Limit != 10 {
			t.Fatalf("other node after one interval: %+v %v", p, ok)
		}
		rec = call(t, b.h, "GET", "/ratelimit/policies/api", "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"limit":10`) {
			t.Fatalf("GET on the other node: %d %s", rec.Code, rec.Body)
		}

		// Replace all through b, delete through a.
		rec = call(t, b.h, "PUT", "/ratelimit/policies", `{"policies":[{"name":"x","match":"*","limit":1,"period":"1s"},{"name":"api","match":"api:*","limit":5,"period":"1s"}]}`)
		if rec.Code != 200 {
			t.Fatalf("PUT all: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if got := names(a.l.Policies()); !slices.Equal(got, []string{"x", "api"}) {
			t.Fatalf("node a after replace: %v", got)
		}
		rec = call(t, a.h, "DELETE", "/ratelimit/policies/x", "")
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"deleted":true`) {
			t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		for _, n := range []*syncNode{a, b} {
			if got := names(n.l.Policies()); !slices.Equal(got, []string{"api"}) {
				t.Fatalf("after delete: %v", got)
			}
		}
	})
}

// While the store fails, writes answer 503 and change nothing anywhere,
// and nodes keep the policies they had.
func TestPolicySyncStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := new(flakyStore)
		if err := st.PutPolicy(t.Context(), policystoretest.Policy("keep", 3)); err != nil {
			t.Fatal(err)
		}
		a := newSyncNode(t, st, time.Second)
		st.down.Store(true)
		for _, c := range []struct{ method, path, body string }{
			{"PUT", "/ratelimit/policies/new", `{"match":"*","limit":1,"period":"1s"}`},
			{"PUT", "/ratelimit/policies", `{"policies":[]}`},
			{"DELETE", "/ratelimit/policies/keep", ""},
		} {
			rec := call(t, a.h, c.method, c.path, c.body)
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"unavailable"`) {
				t.Errorf("%s %s with the store down: %d %s", c.method, c.path, rec.Code, rec.Body)
			}
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if !errors.Is(a.s.Err(), errDown) {
			t.Errorf("Err() = %v, want the store's error", a.s.Err())
		}
		if got := names(a.l.Policies()); !slices.Equal(got, []string{"keep"}) {
			t.Fatalf("policies while the store is down: %v", got)
		}
		st.down.Store(false)
		if ps, _ := st.LoadPolicies(t.Context()); !slices.Equal(names(ps), []string{"keep"}) {
			t.Fatalf("store changed by failed writes: %v", names(ps))
		}
		// An invalid policy is 400 and never reaches the store.
		rec := call(t, a.h, "PUT", "/ratelimit/policies/bad", `{"match":"*","limit":0,"period":"1s"}`)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("invalid policy: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if a.s.Err() != nil {
			t.Errorf("Err() after the store is back: %v", a.s.Err())
		}
	})
}
