package engine

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/contract"
	"pgregory.net/rapid"
)

// scanOnly is a Backend whose Scan returns a fixed listing in the pages
// given, in any order and with repeats, as a backend's Scan may; its
// other methods are not called by ListSorted.
type scanOnly struct {
	contract.Backend
	pages [][]string
	views map[string]contract.View
	aggr  error
}

func (s *scanOnly) Scan(_ context.Context, cursor uint64, match string, _ int) ([]string, uint64, error) {
	if int(cursor) >= len(s.pages) {
		return nil, 0, nil
	}
	next := cursor + 1
	if int(next) == len(s.pages) {
		next = 0
	}
	return s.pages[cursor], next, nil
}

func (s *scanOnly) Get(_ context.Context, id string) (contract.View, error) { return s.views[id], nil }

func (s *scanOnly) Aggregate(context.Context, string) (contract.Aggregate, error) {
	return contract.Aggregate{}, s.aggr
}

// TestListSortedProperty: whatever order, page sizes and repeats Scan
// has, paging ListSorted with after visits every id once, in byte order,
// and keep filters.
func TestListSortedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfNDistinct(rapid.StringMatching(`[aAzZ_:0-9\x{e9}]{1,6}`), 0, 40, rapid.ID).Draw(t, "ids")
		listing := slices.Clone(ids)
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, max(len(ids)-1, 0)), 0, 10).Draw(t, "repeats") {
			if len(ids) > 0 {
				listing = append(listing, ids[i])
			}
		}
		perm := rapid.Permutation(listing).Draw(t, "order")
		var pages [][]string
		for len(perm) > 0 {
			n := min(rapid.IntRange(0, 7).Draw(t, "page"), len(perm))
			pages = append(pages, perm[:n])
			perm = perm[n:]
		}
		b := &scanOnly{pages: pages}
		limit := rapid.IntRange(1, 10).Draw(t, "limit")
		filter := rapid.Bool().Draw(t, "filter")
		var keep func(string) bool
		if filter {
			keep = func(id string) bool { return !strings.HasPrefix(id, "a") }
		}
		var want []string
		for _, id := range ids {
			if keep == nil || keep(id) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		var got []string
		after := ""
		for range len(ids) + 2 {
			page, more, err := ListSorted(context.Background(), b, "", keep, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit || (more && len(page) != limit) {
				t.Fatalf("page of %d with limit %d, more %v", len(page), limit, more)
			}
			got = append(got, page...)
			if !more {
				break
			}
			after = page[len(page)-1]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages %q, want %q", got, want)
		}
	})
}

// TestAggregateOverflowFigures: an overflowing aggregate's error counts
// the additive counters with the prefix and sums them exactly; other
// errors pass through.
func TestAggregateOverflowFigures(t *testing.T) {
	const max = 1<<63 - 1
	b := &scanOnly{
		pages: [][]string{{"p:a", "p:b", "q:c"}, {"p:h", "p:gone", "p:a"}},
		views: map[string]contract.View{
			"p:a": {Exists: true, Kind: contract.KindCounter, Value: max},
			"p:b": {Exists: true, Kind: contract.KindPN, Value: max},
			"q:c": {Exists: true, Kind: contract.KindCounter, Value: 5},
			"p:h": {Exists: true, Kind: contract.KindHash},
		},
		aggr: contract.ErrOverflow,
	}
	_, err := AggregateOverflow(context.Background(), b, "p:")
	var oe *OverflowError
	if !errors.As(err, &oe) || !errors.Is(err, contract.ErrOverflow) {
		t.Fatalf("err %v, want an *OverflowError", err)
	}
	// p:a, listed twice by the scan, counts once; the hash, the missing
	// id and q:c do not count.
	want := new(big.Int).Mul(big.NewInt(max), big.NewInt(2))
	if oe.Prefix != "p:" || oe.Count != 2 || oe.Sum.Cmp(want) != 0 {
		t.Errorf("count %d sum %s", oe.Count, oe.Sum)
	}
}

func TestAggregateOverflowPassesOtherErrors(t *testing.T) {
	b := &scanOnly{aggr: contract.ErrUnavailable}
	if _, err := AggregateOverflow(context.Background(), b, "p:"); !errors.Is(err, contract.ErrUnavailable) || errors.As(err, new(*OverflowError)) {
		t.Errorf("err %v, want ErrUnavailable as it is", err)
	}
	b = &scanOnly{aggr: nil}
	if _, err := AggregateOverflow(context.Background(), b, "p:"); err != nil {
		t.Errorf("err %v", err)
	}
}
