package tiered

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
	"github.com/counterd/counterd/internal/store/postgres"
)

// FuzzDecodeSpec: a stored rollup spec is accepted only if it validates.
func FuzzDecodeSpec(f *testing.F) {
	def, _ := json.Marshal(rollup.DefaultSpec())
	f.Add(def)
	f.Add([]byte(`{"Minute":-1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSpec(data)
		if err == nil && s.Validate() != nil {
			t.Fatalf("accepted invalid spec %+v", s)
		}
	})
}

// TestChunkMapping: for every granularity, a bucket's chunk (index,
// offset, length) agrees with rollup's bucket numbering and chunkSpan.
func TestChunkMapping(t *testing.T) {
	lo := time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(2199, 12, 1, 0, 0, 0, 0, time.UTC).Unix()
	prop := func(seed int64) bool {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		ts := time.Unix(lo+r.Int64N(hi-lo), 0).UTC()
		for g := range granNames {
			b := g.Bucket(ts.UnixNano())
			start := time.Unix(0, g.Start(b)).UTC()
			idx, off, n := chunkOf(g, start)
			s, e := chunkSpan(g, idx)
			if off < 0 || off >= n || start.Before(s) || !start.Before(e) {
				t.Logf("%s %v: chunk %d off %d of %d spans [%v, %v)", g, start, idx, off, n, s, e)
				return false
			}
			if g.Bucket(s.UnixNano())+int64(off) != b || g.Bucket(e.UnixNano())-g.Bucket(s.UnixNano()) != int64(n) {
				t.Logf("%s %v: bucket numbering disagrees", g, start)
				return false
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// TestFromPG: conversion keeps values, drops zero fields, sorts fields,
// never restores windows, and refuses unknown kinds.
func TestFromPG(t *testing.T) {
	now := time.Now()
	prop := func(fields map[string]int64, value int64) bool {
		rec, ok, err := fromPG(postgres.Record{ID: "h", Kind: "hash", Fields: fields, Value: value, ExpiresAt: now.Add(time.Hour)}, now)
		if err != nil || !ok || rec.TTL != time.Hour {
			return false
		}
		if !sort.SliceIsSorted(rec.Fields, func(i, j int) bool { return rec.Fields[i].Name < rec.Fields[j].Name }) {
			return false
		}
		n := 0
		for _, v := range fields {
			if v != 0 {
				n++
			}
		}
		for _, f := range rec.Fields {
			if f.Value == 0 || fields[f.Name] != f.Value {
				return false
			}
		}
		return len(rec.Fields) == n
	}
	if err := quick.Check(prop, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := fromPG(postgres.Record{Kind: "window", Value: 5}, now); ok || err != nil {
		t.Fatal("window restored")
	}
	if _, _, err := fromPG(postgres.Record{Kind: "bogus"}, now); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// TestPNSlot: the single replica shows the value, including MinInt64.
func TestPNSlot(t *testing.T) {
	prop := func(v int64) bool {
		s := pnSlot("", v)
		return int64(s.P-s.N) == v && (s.P == 0 || s.N == 0)
	}
	if err := quick.Check(prop, nil); err != nil {
		t.Fatal(err)
	}
	if s := pnSlot("n", -1<<63); s.N != 1<<63 {
		t.Fatalf("MinInt64 slot = %+v", s)
	}
}

// TestValidateRejectsBeforeWriting: validation catches bad input without a
// store (no backend here: a nil one would panic if reached).
func TestValidateRejectsBeforeWriting(t *testing.T) {
	bad := []contract.Op{
		{Type: contract.OpAdd, ID: ""},
		{Type: contract.OpAdd, ID: "}x"},
		{Type: contract.OpAdd, ID: "a", Kind: contract.KindHash},
		{Type: contract.OpAdd, ID: "a", Shards: 5000},
		{Type: contract.OpSet, ID: "a", TTL: -1},
		{Type: contract.OpHAdd, ID: "a"},
		{Type: contract.OpPFAdd, ID: "a", HLLPrecision: 10},
		{Type: contract.OpPFMerge, ID: "a", Sources: []string{""}},
		{Type: 99, ID: "a"},
	}
	lim := limitsFor(0)
	for _, op := range bad {
		if err := op.Validate(lim); err == nil {
			t.Errorf("validate(%+v) = nil", op)
		}
	}
	if _, ok := inverse(contract.Op{Type: contract.OpAdd, Delta: -1 << 63}); ok {
		t.Error("MinInt64 add has no inverse")
	}
}

// FuzzGenField: a coalesced journal field, as a write's script names it
// (journalOf, redisstore.Journal.Field) and as the trim names it
// (genFields), reads back (parseGenField) as the generation, delta and
// life it was written for, whatever the id, kind and hash field hold; a
// field written before lives were journaled (no life) reads back with
// life 0.
func FuzzGenField(f *testing.F) {
	f.Add("v:1", "counter", -1, "", uint64(3), int64(29000000), int64(5), uint64(1))
	f.Add("a|b|c", "hash", -1, "f|1:x", uint64(1), int64(0), int64(-9223372036854775808), uint64(1<<32+1))
	f.Add("x", "sharded", 7, "", uint64(18446744073709551615), int64(1), int64(9223372036854775807), uint64(0))
	f.Add("L1|2:x", "counter", 0, "L3|", uint64(2), int64(2), int64(1), uint64(7))
	f.Fuzz(func(t *testing.T, id, kind string, shard int, field string, gen uint64, minute, delta int64, life uint64) {
		if id == "" || strings.Contains(kind, "|") || minute < 0 || minute > 1<<40 {
			return
		}
		b := &Backend{inst: "n_abc123"}
		at := time.Unix(minute*60, 0).UTC()
		j := b.journalOf(id, gen, at)
		name := j.Field(kind, shard, life, field)
		m := map[string][]string{}
		genFields(b.inst, postgres.JournalWrite{Gen: gen, Deltas: []postgres.Delta{{CounterID: id, Kind: kind, Shard: shard, Field: field, At: at, Life: life}}}, m)
		if fs := m[j.Key]; len(fs) != 1 || fs[0] != name {
			t.Fatalf("trim names %v, the script %q", m, name)
		}
		old := fmt.Sprintf("%s%s|%d|%s%s", j.Head, kind, shard, j.Tail, field) // before lives
		for _, c := range []struct {
			name string
			life uint64
		}{{name, life}, {old, 0}} {
			inst, rest, ok := strings.Cut(c.name, "-")
			if !ok || inst != b.inst {
				t.Fatalf("instance of %q: %q", c.name, inst)
			}
			g, d, err := parseGenField(rest, strconv.FormatInt(delta, 10))
			if err != nil {
				t.Fatal(err)
			}
			want := postgres.Delta{CounterID: id, Kind: kind, Shard: shard, Field: field, Delta: delta, At: at, Life: c.life}
			if g != gen || d.CounterID != want.CounterID || d.Kind != want.Kind || d.Shard != want.Shard || d.Field != want.Field || d.Delta != want.Delta || !d.At.Equal(want.At) || d.Life != want.Life {
				t.Fatalf("%q: read %d %+v, wrote %d %+v", c.name, g, d, gen, want)
			}
		}
	})
}
