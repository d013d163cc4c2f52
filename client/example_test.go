package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/counterd/counterd/client"
)

// The examples run against a real counterd HTTP handler over an in-memory
// engine, started on a loopback port by startExampleServer. Outside of the
// examples the address would be that of a running counterd, such as
// "http://127.0.0.1:8080".

func ExampleNew() {
	addr, stop := startExampleServer()
	defer stop()

	c, err := client.New(addr,
		client.WithTimeout(2*time.Second),
		client.WithRetries(5),
		client.WithDefaultDurability("sync"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r, err := c.Incr(context.Background(), "page_views:article_123", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Value)
	// Output: 1
}

func ExampleClient_Incr() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	for range 3 {
		if _, err := c.Incr(ctx, "likes:post_1", 1); err != nil {
			log.Fatal(err)
		}
	}
	r, err := c.Incr(ctx, "likes:post_1", 10, client.WithDurability("sync"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ID, r.Value, r.Kind)
	// Output: likes:post_1 13 counter
}

func ExampleClient_Get() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	missing, _ := c.Get(ctx, "views:home")
	fmt.Println(missing.Value, missing.Exists)

	c.Incr(ctx, "views:home", 5)
	v, err := c.Get(ctx, "views:home")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Value, v.Exists, v.Kind)
	// Output:
	// 0 false
	// 5 true counter
}

// Set with an expected version is optimistic locking: read, compute, write
// back only if nobody wrote in between.
func ExampleClient_Set() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	c.Set(ctx, "stock:sku_9", 10)
	v, _ := c.Get(ctx, "stock:sku_9")

	// Someone else writes first.
	c.Set(ctx, "stock:sku_9", 8)

	_, err := c.Set(ctx, "stock:sku_9", v.Value-1, client.WithExpectedVersion(v.Version))
	fmt.Println(errors.Is(err, client.ErrVersionConflict))
	var ce *client.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Status, ce.Code)
	}
	// Output:
	// true
	// 409 version_conflict
}

// An idempotency key makes a retry safe even from another process: the
// second call is answered from the server's idempotency table.
func ExampleWithIdempotencyKey() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	key := "order-4711-credit"
	r1, _ := c.Incr(ctx, "credits:user_7", 100, client.WithIdempotencyKey(key))
	r2, _ := c.Incr(ctx, "credits:user_7", 100, client.WithIdempotencyKey(key))
	fmt.Println(r1.Value, r1.Replayed)
	fmt.Println(r2.Value, r2.Replayed)
	// Output:
	// 100 false
	// 100 true
}

func ExampleClient_PFAdd() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	c.PFAdd(ctx, "uniques:mon", "alice", "bob", "carol")
	c.PFAdd(ctx, "uniques:tue", "bob", "dave")
	mon, _ := c.PFCount(ctx, "uniques:mon")
	both, _ := c.PFCount(ctx, "uniques:mon", "uniques:tue")
	fmt.Println(mon.Value, both.Value)
	// Output: 3 4
}

func ExampleClient_HIncr() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	c.HIncr(ctx, "post:42", map[string]int64{"views": 10, "likes": 1})
	fields, err := c.HIncr(ctx, "post:42", map[string]int64{"views": 1, "shares": 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fields["views"], fields["shares"])
	all, _ := c.HGetAll(ctx, "post:42")
	fmt.Println(all)
	// Output:
	// 11 2
	// map[likes:1 shares:2 views:11]
}

func ExampleClient_WindowIncr() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	spec := client.WindowSpec{Granularity: time.Second, Window: 5 * time.Minute}
	for range 4 {
		c.WindowIncr(ctx, "hits:api", 1, spec)
	}
	w, err := c.Window(ctx, "hits:api")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Value, w.Granularity, w.Window)
	// Output: 4 1s 5m0s
}

func ExampleClient_Aggregate() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	c.Incr(ctx, "api_calls:tenant_a:get", 3)
	c.Incr(ctx, "api_calls:tenant_a:put", 2)
	c.Incr(ctx, "api_calls:tenant_b:get", 7)
	a, _ := c.Aggregate(ctx, "api_calls:tenant_a:")
	fmt.Println(a.Value, a.Count)
	// Output: 5 2
}

func ExampleClient_Batch() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	rs, err := c.Batch(ctx, []client.Op{
		client.IncrOp("views:a", 2),
		client.SetOp("quota:a", 100),
		client.HIncrOp("stats:a", map[string]int64{"clicks": 1}),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rs[0].Value, rs[1].Value, rs[2].Fields["clicks"])

	// One failing op fails the whole batch; nothing is applied.
	_, err = c.Batch(ctx, []client.Op{
		client.IncrOp("views:a", 1),
		client.PFAddOp("views:a", "x"), // views:a is not a HyperLogLog
	})
	var ce *client.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code, ce.Index)
	}
	v, _ := c.Get(ctx, "views:a")
	fmt.Println(v.Value)
	// Output:
	// 2 100 1
	// wrong_kind 1
	// 2
}

func ExampleClient_List() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	for _, id := range []string{"user:1", "user:2", "user:3", "team:1"} {
		c.Incr(ctx, id, 1)
	}
	n := 0
	for _, err := range c.ListAll(ctx, "user:") {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n)
	// Output: 3
}

func ExampleClient_TTL() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	ttl, _ := c.TTL(ctx, "session:9")
	fmt.Println(ttl == client.NoCounter)
	c.Incr(ctx, "session:9", 1)
	ttl, _ = c.TTL(ctx, "session:9")
	fmt.Println(ttl == client.NoTTL)
	c.Expire(ctx, "session:9", time.Hour)
	ttl, _ = c.TTL(ctx, "session:9")
	fmt.Println(ttl > 59*time.Minute)
	// Output:
	// true
	// true
	// true
}

// A rollup spec makes a namespace's counters keep minute, hour, day and
// month buckets of their increments; Series reads them back.
func ExampleClient_Series() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	if _, err := c.SetRollup(ctx, "page_views", client.RollupSpec{Minute: "2d", Hour: "30d"}); err != nil {
		log.Fatal(err)
	}
	for _, n := range []int64{100, 150, 200} {
		c.Incr(ctx, "page_views:article_123", n)
	}
	// Three whole UTC hours: the previous one, this one and the next one.
	from := time.Now().Add(-time.Hour).Truncate(time.Hour)
	s, err := c.Series(ctx, "page_views:article_123", client.GranularityHour, from, from.Add(3*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Granularity, s.Source, len(s.Buckets), s.Total)
	fmt.Println(s.Buckets[0].Start.Equal(from), s.Buckets[0].Count)
	// Output:
	// hour hour 3 450
	// true 0
}

// Unique counts over the last N days come from per-day sketches of an hll
// counter whose namespace has a rollup spec.
func ExampleClient_Uniques() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	c.SetRollup(ctx, "visitors", client.RollupSpec{UniqueDays: "30d"})
	c.PFAdd(ctx, "visitors:article_123", "alice", "bob", "carol")
	c.PFAdd(ctx, "visitors:article_123", "bob", "dave")
	u, err := c.Uniques(ctx, "visitors:article_123", "7d")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d (%d..%d, std error %.2f%%) in the last %s\n", u.Value, u.Low, u.High, u.StdError*100, u.To.Sub(u.From))
	// Output: 4 (4..4, std error 0.81%) in the last 168h0m0s
}

func ExampleClient_SetRollup() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	ctx := context.Background()

	// Keep minutes for 48 hours, hours for 30 days, no months; the rest
	// takes the defaults.
	spec, err := c.SetRollup(ctx, "api_requests", client.RollupSpec{Minute: "48h", Hour: "30d", Month: "0"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", *spec)

	all, _ := c.ListRollups(ctx)
	fmt.Println(len(all), all["api_requests"].Day)

	deleted, _ := c.DeleteRollup(ctx, "api_requests")
	_, err = c.GetRollup(ctx, "api_requests")
	fmt.Println(deleted, errors.Is(err, client.ErrNotFound))
	// Output:
	// {Minute:2d Hour:30d Day:400d Month:0 UniqueHours:2d UniqueDays:400d Precision:14 StdError:0.008125}
	// 1 400d
	// true true
}
