package client_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/counterd/counterd/client"
)

func TestRollupSpecs(t *testing.T) {
	c, ctx := newClient(t)
	_, err := c.GetRollup(ctx, "page_views")
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)
	if l := must(c.ListRollups(ctx)).ok(t); l == nil || len(l) != 0 {
		t.Fatalf("ListRollups of a new server = %#v", l)
	}

	// Absent fields take the defaults; retentions come back normalised.
	got := must(c.SetRollup(ctx, "page_views", client.RollupSpec{Minute: "48h", Hour: "30d", Month: "0", Precision: 12})).ok(t)
	want := client.RollupSpec{
		Minute: "2d", Hour: "30d", Day: "400d", Month: "0",
		UniqueHours: "2d", UniqueDays: "400d", Precision: 12, StdError: 0.01625,
	}
	if *got != want {
		t.Fatalf("SetRollup = %+v, want %+v", *got, want)
	}
	if got := must(c.GetRollup(ctx, "page_views")).ok(t); *got != want {
		t.Fatalf("GetRollup = %+v, want %+v", *got, want)
	}
	// The zero spec is the defaults. StdError is not sent (the server
	// rejects unknown members), and keys are escaped.
	defaults := client.RollupSpec{
		Minute: "2d", Hour: "90d", Day: "400d", Month: "3660d",
		UniqueHours: "2d", UniqueDays: "400d", Precision: 14, StdError: 1.04 / 128,
	}
	for _, key := range []string{"likes:article_1", "a/b?c#d", ".."} {
		got := must(c.SetRollup(ctx, key, client.RollupSpec{StdError: 0.5})).ok(t)
		if *got != defaults {
			t.Fatalf("SetRollup(%q, {}) = %+v, want %+v", key, *got, defaults)
		}
		if got := must(c.GetRollup(ctx, key)).ok(t); *got != defaults {
			t.Fatalf("GetRollup(%q) = %+v", key, *got)
		}
	}
	l := must(c.ListRollups(ctx)).ok(t)
	wantList := map[string]client.RollupSpec{
		"page_views": want, "likes:article_1": defaults, "a/b?c#d": defaults, "..": defaults,
	}
	if !maps.Equal(l, wantList) {
		t.Fatalf("ListRollups = %+v, want %+v", l, wantList)
	}

	for _, spec := range []client.RollupSpec{
		{Minute: "soon"},
		{Minute: "-1h"},
		{Hour: "30s"}, // shorter than a bucket
		{UniqueDays: "500d"},
		{UniqueHours: "200h"},
		{Precision: 9},
		{Precision: 17},
	} {
		_, err := c.SetRollup(ctx, "x", spec)
		wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	}
	_, err = c.SetRollup(ctx, "bad\x01key", client.RollupSpec{})
	wantCode(t, err, 400, client.CodeInvalidID, client.ErrInvalidID)
	for _, err := range []error{
		second(c.SetRollup(ctx, "", client.RollupSpec{})),
		second(c.GetRollup(ctx, "")),
		second(c.DeleteRollup(ctx, "")),
	} {
		if !errors.Is(err, client.ErrInvalidID) {
			t.Fatalf("empty key: %v", err)
		}
	}

	if ok := must(c.DeleteRollup(ctx, "page_views")).ok(t); !ok {
		t.Fatal("DeleteRollup reported false")
	}
	if ok := must(c.DeleteRollup(ctx, "page_views")).ok(t); ok {
		t.Fatal("second DeleteRollup reported true")
	}
	_, err = c.GetRollup(ctx, "page_views")
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)
	if l := must(c.ListRollups(ctx)).ok(t); len(l) != 3 {
		t.Fatalf("ListRollups after DeleteRollup = %+v", l)
	}
}

func second[T any](_ T, err error) error { return err }

func TestSeries(t *testing.T) {
	c, ctx := newClient(t)
	_, err := c.Series(ctx, "page_views:a", "", time.Time{}, time.Time{})
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)

	must(c.SetRollup(ctx, "page_views", client.RollupSpec{Minute: "2d", Hour: "30d"})).ok(t)
	before := time.Now()
	for i := range 5 {
		must(c.Incr(ctx, "page_views:a", int64(i+1))).ok(t) // 15
	}
	must(c.Decr(ctx, "page_views:a", 3)).ok(t)  // decrements count too
	must(c.Set(ctx, "page_views:b", 100)).ok(t) // a set is not counted
	after := time.Now()

	// from and to in any time zone; the server aligns them outward.
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	from := before.Add(-10 * time.Minute).In(zone)
	to := after.Add(time.Minute).In(zone)
	s := must(c.Series(ctx, "page_views:a", client.GranularityMinute, from, to)).ok(t)
	if s.ID != "page_views:a" || s.Granularity != "minute" || s.Source != "minute" || s.Total != 12 {
		t.Fatalf("Series: %+v", s)
	}
	if !s.From.Equal(from.Truncate(time.Minute)) || s.To.Before(to) || s.To.Sub(to) >= time.Minute {
		t.Fatalf("Series range %v .. %v for %v .. %v", s.From, s.To, from, to)
	}
	checkBuckets(t, s, time.Minute)
	if n := len(s.Buckets); n < 11 || n > 13 {
		t.Fatalf("%d minute buckets", n)
	}
	var sum int64
	for _, v := range s.Values() {
		sum += v
	}
	if sum != 12 {
		t.Fatalf("Values sum to %d", sum)
	}

	// Defaults: hour buckets, the last 60 of them up to now.
	s = must(c.Series(ctx, "page_views:a", "", time.Time{}, time.Time{})).ok(t)
	if s.Granularity != "hour" || s.Source != "hour" || len(s.Buckets) != 60 || s.Total != 12 || s.To.Before(after) {
		t.Fatalf("default Series: %+v", s)
	}
	checkBuckets(t, s, time.Hour)
	// Only from: up to now.
	s = must(c.Series(ctx, "page_views:a", client.GranularityDay, before.Add(-72*time.Hour), time.Time{})).ok(t)
	if s.Granularity != "day" || s.Total != 12 || len(s.Buckets) < 4 || len(s.Buckets) > 5 {
		t.Fatalf("day Series: %+v", s)
	}
	checkBuckets(t, s, 24*time.Hour)
	s = must(c.Series(ctx, "page_views:a", client.GranularityMonth, time.Time{}, time.Time{})).ok(t)
	if s.Source != "month" || s.Total != 12 || len(s.Buckets) != 60 {
		t.Fatalf("month Series: %+v", s)
	}
	if s.Buckets[59].Start.Day() != 1 || s.Buckets[59].Start.Hour() != 0 {
		t.Fatalf("month bucket starts %v", s.Buckets[59].Start)
	}

	// A set is not an increment; a missing counter reads as zeros.
	for _, id := range []string{"page_views:b", "page_views:missing"} {
		s = must(c.Series(ctx, id, client.GranularityMinute, from, time.Time{})).ok(t)
		if s.Total != 0 || len(s.Buckets) < 10 {
			t.Fatalf("Series(%q): %+v", id, s)
		}
		for _, b := range s.Buckets {
			if b.Count != 0 {
				t.Fatalf("Series(%q): %+v", id, s)
			}
		}
	}

	// Nothing kept at or below the granularity.
	must(c.SetRollup(ctx, "coarse", client.RollupSpec{Minute: "0", Hour: "0"})).ok(t)
	must(c.Incr(ctx, "coarse:x", 1)).ok(t)
	_, err = c.Series(ctx, "coarse:x", client.GranularityHour, time.Time{}, time.Time{})
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	if s := must(c.Series(ctx, "coarse:x", client.GranularityDay, time.Time{}, time.Time{})).ok(t); s.Total != 1 {
		t.Fatalf("Series coarse: %+v", s)
	}

	must(c.Incr(ctx, "other", 1)).ok(t)
	_, err = c.Series(ctx, "other", "", time.Time{}, time.Time{})
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)
	must(c.HIncr(ctx, "page_views:h", map[string]int64{"f": 1})).ok(t)
	_, err = c.Series(ctx, "page_views:h", "", time.Time{}, time.Time{})
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	_, err = c.Series(ctx, "page_views:a", "week", time.Time{}, time.Time{})
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	_, err = c.Series(ctx, "page_views:a", client.GranularityMinute, after.Add(-400*24*time.Hour), after)
	wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument) // > 100,000 buckets
	if _, err := c.Series(ctx, "", "", time.Time{}, time.Time{}); !errors.Is(err, client.ErrInvalidID) {
		t.Fatalf("empty id: %v", err)
	}
}

// checkBuckets checks that s's buckets tile [s.From, s.To) in steps of
// about d (months vary).
func checkBuckets(t *testing.T, s *client.Series, d time.Duration) {
	t.Helper()
	if len(s.Buckets) == 0 || !s.Buckets[0].Start.Equal(s.From) {
		t.Fatalf("first bucket does not start at From %v: %+v", s.From, s.Buckets)
	}
	for i := 1; i < len(s.Buckets); i++ {
		if got := s.Buckets[i].Start.Sub(s.Buckets[i-1].Start); got != d {
			t.Fatalf("bucket %d starts %v after bucket %d, want %v", i, got, i-1, d)
		}
	}
	if got := s.To.Sub(s.Buckets[len(s.Buckets)-1].Start); got != d {
		t.Fatalf("last bucket ends %v after its start, want %v", got, d)
	}
}

func TestUniques(t *testing.T) {
	c, ctx := newClient(t)
	must(c.SetRollup(ctx, "visitors", client.RollupSpec{UniqueDays: "30d", Precision: 12})).ok(t)
	const n = 1000
	for i := 0; i < n; i += 100 {
		items := make([]string, 100)
		for j := range items {
			items[j] = fmt.Sprintf("user_%d", i+j)
		}
		must(c.PFAdd(ctx, "visitors:article_1", items...)).ok(t)
	}
	u := must(c.Uniques(ctx, "visitors:article_1", "7d")).ok(t)
	if u.ID != "visitors:article_1" || u.Last != "7d" || u.Precision != 12 || u.Sketches < 1 {
		t.Fatalf("Uniques: %+v", u)
	}
	if math.Abs(float64(u.Value)-n) > 4*0.01625*n || math.Abs(u.StdError-0.01625) > 1e-9 {
		t.Fatalf("Uniques value %d ± %g, want about %d", u.Value, u.StdError, n)
	}
	if u.Low >= u.Value || u.High <= u.Value || u.High-u.Low < 50 || u.High-u.Low > 80 {
		t.Fatalf("Uniques interval %d..%d around %d", u.Low, u.High, u.Value)
	}
	if u.To.Sub(u.From) != 7*24*time.Hour || !u.To.After(time.Now()) || u.From.Hour() != 0 {
		t.Fatalf("Uniques range %v .. %v", u.From, u.To)
	}

	// The default is today; hours work the same way.
	for last, span := range map[string]time.Duration{"": 24 * time.Hour, "24h": 24 * time.Hour, "3h": 3 * time.Hour} {
		v := must(c.Uniques(ctx, "visitors:article_1", last)).ok(t)
		if v.Value > u.Value || v.Value == 0 || v.To.Sub(v.From) != span {
			t.Fatalf("Uniques(%q): %+v", last, v)
		}
		if last == "" && v.Last != "1d" {
			t.Fatalf("Uniques default last = %q", v.Last)
		}
	}

	for _, last := range []string{"7w", "0d", "-1d", "31d", "401d", "169h", "d"} {
		_, err := c.Uniques(ctx, "visitors:article_1", last)
		wantCode(t, err, 400, client.CodeInvalidArgument, client.ErrInvalidArgument)
	}
	must(c.Incr(ctx, "visitors:count", 1)).ok(t)
	_, err := c.Uniques(ctx, "visitors:count", "")
	wantCode(t, err, 409, client.CodeWrongKind, client.ErrWrongKind)
	must(c.PFAdd(ctx, "nospec:x", "a")).ok(t)
	_, err = c.Uniques(ctx, "nospec:x", "")
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)
	must(c.SetRollup(ctx, "nodays", client.RollupSpec{UniqueDays: "0"})).ok(t)
	must(c.PFAdd(ctx, "nodays:x", "a")).ok(t)
	_, err = c.Uniques(ctx, "nodays:x", "1d")
	wantCode(t, err, 404, client.CodeNotFound, client.ErrNotFound)
	if v := must(c.Uniques(ctx, "nodays:x", "1h")).ok(t); v.Value != 1 {
		t.Fatalf("Uniques 1h: %+v", v)
	}
	if _, err := c.Uniques(ctx, "", ""); !errors.Is(err, client.ErrInvalidID) {
		t.Fatalf("empty id: %v", err)
	}
}
