package client_test

import (
	"testing"

	"github.com/counterd/counterd/client"
)

func TestIncrFloat(t *testing.T) {
	c, ctx := newClient(t)
	if r := must(c.IncrFloat(ctx, "price", "0.1")).ok(t); r.Kind != client.KindFloat || r.Float != "0.1" || r.Version != 1 {
		t.Fatalf("first add: %+v", r)
	}
	if r := must(c.IncrFloat(ctx, "price", "0.2")).ok(t); r.Float != "0.3" {
		t.Fatalf("0.1 + 0.2 = %q, want 0.3 (Redis INCRBYFLOAT)", r.Float)
	}
	if v := must(c.Get(ctx, "price")).ok(t); v.Kind != client.KindFloat || v.Float != "0.3" || v.Value != 0 || !v.Exists {
		t.Fatalf("get: %+v", v)
	}
	_, err := c.IncrFloat(ctx, "price", "nan")
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	_, err = c.IncrFloat(ctx, "price", "inf")
	wantCode(t, err, 422, client.CodeOverflow, client.ErrOverflow)
	_, err = c.Incr(ctx, "price", 1)
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	// An integer counter becomes a float, as in Redis.
	must(c.Incr(ctx, "n", 2)).ok(t)
	if r := must(c.IncrFloat(ctx, "n", "1e1")).ok(t); r.Float != "12" || r.Kind != client.KindFloat {
		t.Fatalf("float add to a counter: %+v", r)
	}
	if r := must(c.Incr(ctx, "n", 1)).ok(t); r.Value != 13 || r.Kind != client.KindCounter {
		t.Fatalf("integer add to an integral float: %+v", r)
	}
	// Beyond the float64 range the text still comes back whole.
	if r := must(c.IncrFloat(ctx, "huge", "1e400")).ok(t); len(r.Float) != 401 {
		t.Fatalf("huge float: %+v", r)
	}
	if v := must(c.Get(ctx, "huge")).ok(t); len(v.Float) != 401 || v.Kind != client.KindFloat {
		t.Fatalf("get huge float: %+v", v)
	}
}

func TestHIncrFloat(t *testing.T) {
	c, ctx := newClient(t)
	if got := must(c.HIncrFloat(ctx, "cart", "price", "0.1")).ok(t); got != "0.1" {
		t.Fatalf("first: %q", got)
	}
	if got := must(c.HIncrFloat(ctx, "cart", "price", "0.2")).ok(t); got != "0.3" {
		t.Fatalf("0.1 + 0.2 = %q", got)
	}
	must(c.HIncrBy(ctx, "cart", "items", 2)).ok(t)
	if got := must(c.HIncrFloat(ctx, "cart", "items", "0.5")).ok(t); got != "2.5" {
		t.Fatalf("items: %q", got)
	}
	if got := must(c.HIncrFloat(ctx, "cart", "items", "0.5")).ok(t); got != "3" {
		t.Fatalf("an integral float field: %q", got)
	}
	v := must(c.Get(ctx, "cart")).ok(t)
	if v.FloatFields["price"] != "0.3" || v.Fields["items"] != 3 || len(v.Fields) != 1 || len(v.FloatFields) != 1 {
		t.Fatalf("get: %+v", v)
	}
	if n, ok, err := c.HGet(ctx, "cart", "items"); n != 3 || !ok || err != nil {
		t.Fatalf("hget items: %d %v %v", n, ok, err)
	}
	if _, ok, err := c.HGet(ctx, "cart", "price"); !ok || err == nil {
		t.Fatalf("hget of a float field: %v %v", ok, err)
	}
	if _, err := c.HGetAll(ctx, "cart"); err == nil {
		t.Fatal("HGetAll of a hash with a float field")
	}
	_, err := c.HIncrFloat(ctx, "cart", "price", "abc")
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	_, err = c.HIncrBy(ctx, "cart", "price", 1)
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
}
