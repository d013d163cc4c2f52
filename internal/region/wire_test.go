package region

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/chunksync"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/engine"
)

func genStates(t *rapid.T, label string, deleted bool) []engine.State {
	n := rapid.IntRange(0, 20).Draw(t, label+"_n")
	seen := map[string]bool{}
	var out []engine.State
	for i := 0; i < n; i++ {
		id := rapid.StringMatching(`[a-z]{1,3}:[0-9]{1,4}`).Draw(t, label+"_id")
		if seen[id] {
			continue
		}
		seen[id] = true
		s := engine.State{ID: id, Version: rapid.Uint64().Draw(t, "v"), Deleted: deleted}
		if !deleted {
			s.Kind = contract.KindCounter
			s.UpdatedAt = rapid.Int64().Draw(t, "u")
			s.Data = rapid.SliceOfN(rapid.Byte(), 1, 10).Draw(t, "d")
		} else {
			s.Kind = contract.KindNone
		}
		out = append(out, s)
	}
	chunksync.SortStates(out)
	return out
}

// TestBatchRoundTrip: DecodeBatch(EncodeBatch(b)) is b.
func TestBatchRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := &Batch{
			From:        rapid.StringMatching(`[A-Za-z0-9_.-]{1,64}`).Draw(t, "from"),
			Node:        rapid.StringMatching(`[a-z0-9-]{0,20}`).Draw(t, "node"),
			Incarnation: rapid.Uint64().Draw(t, "inc"),
			AsOf:        rapid.Int64().Draw(t, "asof"),
			Complete:    rapid.Bool().Draw(t, "complete"),
			Tombs:       genStates(t, "tombs", true),
			States:      genStates(t, "states", false),
		}
		got, err := DecodeBatch(EncodeBatch(nil, b))
		if err != nil {
			t.Fatal(err)
		}
		if got.From != b.From || got.Node != b.Node || got.Incarnation != b.Incarnation || got.AsOf != b.AsOf || got.Complete != b.Complete ||
			len(got.Tombs) != len(b.Tombs) || len(got.States) != len(b.States) {
			t.Fatalf("got %+v, want %+v", got, b)
		}
		for i := range b.States {
			g, w := got.States[i], b.States[i]
			if g.ID != w.ID || g.Version != w.Version || g.UpdatedAt != w.UpdatedAt || !bytes.Equal(g.Data, w.Data) {
				t.Fatalf("state %d: %+v, want %+v", i, g, w)
			}
		}
	})
}

// FuzzDecodeBatch: any bytes decode to a batch or an ErrCorrupt, never a
// panic; what decodes encodes back to the same bytes.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(EncodeBatch(nil, &Batch{From: "eu", Node: "eu-1", Incarnation: 7, AsOf: time.Now().UnixNano(), Complete: true,
		Tombs:  []engine.State{{ID: "a:1", Deleted: true, Version: 3}},
		States: []engine.State{{ID: "a:2", Kind: contract.KindCounter, Version: 2, Data: []byte{2}}}}))
	f.Add([]byte("RGB1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if again := EncodeBatch(nil, b); !bytes.Equal(again, p) {
			// Varints may be non-minimal in p; the decoded batch must
			// still round-trip.
			b2, err := DecodeBatch(again)
			if err != nil || fmt.Sprint(b2) != fmt.Sprint(b) {
				t.Fatalf("re-encoded batch differs: %v", err)
			}
		}
	})
}

// TestDecodeBatchRejects: typed errors for bad input.
func TestDecodeBatchRejects(t *testing.T) {
	good := EncodeBatch(nil, &Batch{From: "eu", States: []engine.State{{ID: "a:1", Kind: contract.KindCounter, Version: 1, Data: []byte{2}}}})
	live := EncodeBatch(nil, &Batch{From: "eu", Tombs: []engine.State{{ID: "a:1", Kind: contract.KindCounter, Version: 1, Data: []byte{2}}}})
	for name, p := range map[string][]byte{
		"empty": nil, "magic": []byte("XXXX"), "truncated": good[:len(good)-3],
		"bad name": EncodeBatch(nil, &Batch{From: "e u"}), "live tombstone": live,
	} {
		if _, err := DecodeBatch(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, _, err := decodeFetch([]byte{2, 'e', 'u', 1, 2}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("fetch with a short hash: %v", err)
	}
}
