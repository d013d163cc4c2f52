package rules

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/pipeline/event"
)

// TestIDCacheMatchesMap: after any sequence of finds and adds, find
// answers only with the id whose bytes it is asked for, and always as a
// map of the sets to their last two ids (the reference) says: an id
// found or added goes first in its set, an add drops the set's second;
// hashes drawn from a few values make ids collide in sets and share
// hashes. The aux word of a found id is the one last set for it since
// it was added (zero when none was: add clears it).
func TestIDCacheMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c idCache
		type kept struct {
			h   uint64
			id  string
			aux uint64
		}
		ref := map[uint64][]kept{} // set -> its ids, the last found or added first
		const sets = idCacheSlots / 2
		hash := func(label string) uint64 {
			return rapid.SampledFrom([]uint64{1, 2, 1 + sets, 1 + 2*sets, 7 << 40, 7<<40 + 1}).Draw(t, label)
		}
		ids := rapid.SampledFrom([]string{"a", "b", "views:p1", "views:p2", "x"})
		for range rapid.IntRange(0, 300).Draw(t, "steps") {
			id, h := ids.Draw(t, "id"), hash("h")
			set := ref[h%sets]
			at := -1
			for i, k := range set {
				if k.h == h && k.id == id {
					at = i
					break
				}
			}
			got, aux, found := c.find([]byte(id), h)
			if found != (at >= 0) || found && got != id {
				t.Fatalf("find(%q, %d) = %q, %v; set holds %+v", id, h, got, found, set)
			}
			if found {
				k := set[at]
				set = append([]kept{k}, append(set[:at:at], set[at+1:]...)...)
				if *aux != k.aux {
					t.Fatalf("aux of %q (%d) = %d, want %d", id, h, *aux, k.aux)
				}
				if rapid.Bool().Draw(t, "set") {
					set[0].aux = rapid.Uint64().Draw(t, "aux")
					*aux = set[0].aux
				}
			}
			if rapid.Bool().Draw(t, "add") {
				if aux := c.add(id, h); *aux != 0 {
					t.Fatalf("add(%q, %d): aux %d", id, h, *aux)
				}
				set = append([]kept{{h: h, id: id}}, set[:min(len(set), 1)]...)
			}
			ref[h%sets] = set
		}
	})
}

// TestIDCacheSampling: a cache whose look-ups of a sample found fewer
// than one id in idMinHit goes idSkip ids without look-ups and then
// samples again; one that found more keeps looking up.
func TestIDCacheSampling(t *testing.T) {
	for _, every := range []int{1, 2, idMinHit, idMinHit + 1, idSample + 1} {
		var c idCache
		for round := range 2 {
			hits := 0
			for i := range idSample {
				if !c.use() {
					t.Fatalf("one found in %d, round %d: look-up %d of a sample refused", every, round, i)
				}
				c.count(i%every == 0)
				if i%every == 0 {
					hits++
				}
			}
			skipped := 0
			for !c.use() {
				skipped++
			}
			c.count(false) // the look-up use allowed: the next sample's first
			want := 0
			if hits*idMinHit < idSample {
				want = idSkip
			}
			if skipped != want {
				t.Fatalf("one found in %d, round %d (%d found): %d ids without look-ups, want %d", every, round, hits, skipped, want)
			}
			c.looks, c.hits = 0, 0
		}
	}
}

// TestInputReuseMatchesFresh: the consumer's way of evaluating, one
// Input reset for event after event (its caches of counter ids and its
// slab of items kept), gives every event the hits and errors a fresh
// Input does, with IDHash the hash of each id; a hit's Aux word is the
// one the test last set for its rule and id, or zero when the rule's
// cache dropped the id since (TestIDCacheMatchesMap tells when).
func TestInputReuseMatchesFresh(t *testing.T) {
	s, err := Load("rules.yaml", []byte(`rules:
  - name: views
    filter: event.type == "impression"
    counter: '"views:" + event.post'
    add: "1"
  - name: viewers
    counter: '"viewers:" + event.post'
    pfadd: event.user
  - name: recent
    counter: '"recent:" + event.user'
    window: {granularity: 1m, span: 1h}
  - name: either
    filter: event.?b.orValue(false) == true
    counter: 'event.type == "click" ? "c:" + event.id : "i:" + event.type'
    hadd: {field: event.id}
`))
	if err != nil {
		t.Fatal(err)
	}
	kept := 0 // hits whose Aux word held what the test set for them
	rapid.Check(t, func(t *rapid.T) {
		var e event.Event
		in := NewInput(&e)
		var hits []Hit
		type key struct {
			rule *Rule
			id   string
		}
		words := map[key]uint64{} // what the test set for each rule's id
		for range rapid.IntRange(1, 40).Draw(t, "events") {
			js := genEvent(t)
			if err := event.DecodeInto(&e, []byte(js), event.Limits{}); err != nil {
				t.Fatalf("%s: %v", js, err)
			}
			in.Reset(&e)
			var gerr error
			hits, gerr = s.Eval(in, hits[:0])
			fresh, ferr := event.Decode([]byte(js), event.Limits{})
			if ferr != nil {
				t.Fatal(ferr)
			}
			want, werr := s.Eval(NewInput(&fresh), nil)
			if (gerr != nil) != (werr != nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Fatalf("%s: error %v, afresh %v", js, gerr, werr)
			}
			if len(hits) != len(want) {
				t.Fatalf("%s: %d hits, afresh %d", js, len(hits), len(want))
			}
			for i := range hits {
				if hits[i].Rule != want[i].Rule || !reflect.DeepEqual(hits[i].Op, want[i].Op) {
					t.Fatalf("%s: hit %d %+v, afresh %+v", js, i, hits[i], want[i])
				}
				if hits[i].IDHash != HashID(hits[i].Op.ID) || want[i].IDHash != hits[i].IDHash {
					t.Fatalf("%s: hit %d id %q hash %d, afresh %d, HashID %d", js, i, hits[i].Op.ID, hits[i].IDHash, want[i].IDHash, HashID(hits[i].Op.ID))
				}
				if w := hits[i].Aux; w != nil {
					k := key{hits[i].Rule, hits[i].Op.ID}
					if *w != 0 && *w != words[k] {
						t.Fatalf("%s: hit %d (%q) aux %d, want %d or 0", js, i, hits[i].Op.ID, *w, words[k])
					}
					if *w != 0 {
						kept++
					}
					v := rapid.Uint64Min(1).Draw(t, "aux")
					*w, words[k] = v, v
				}
			}
		}
	})
	if kept == 0 {
		t.Error("no hit had the Aux word set for its id before")
	}
}
