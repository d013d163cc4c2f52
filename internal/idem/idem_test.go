package idem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// res is a result for the tests: a value and the replayed mark.
type res struct {
	V        int64
	Note     string
	Replayed bool `json:"-"`
}

func (r res) AppendIdem(b []byte) []byte {
	b = binary.AppendVarint(b, r.V)
	return AppendString(b, r.Note)
}

func (res) ReadIdem(d *Reader) res { return res{V: d.Varint(), Note: d.String()} }

func (r res) AsReplayed() res {
	r.Replayed = true
	return r
}

var errBusy = errors.New("busy")

// model is a store in memory whose Release can be made to fail, and whose
// Wait gives up at once (a bounded wait).
type model struct {
	recs        map[string]*Record[res]
	releaseFail bool
	waits       int
	apply       func() ([]res, error)
}

func (m *model) Claim(_ context.Context, c *Record[res]) (*Record[res], error) {
	if h := m.recs[c.Key]; h != nil {
		return h, nil
	}
	m.recs[c.Key] = c
	return nil, nil
}

func (m *model) Wait(context.Context, *Record[res]) error { m.waits++; return errBusy }

func (m *model) Commit(_ context.Context, c *Record[res]) ([]res, error) {
	out, err := m.apply()
	if err != nil {
		return nil, err
	}
	d := c.Done(out)
	m.recs[c.Key] = &d
	return out, nil
}

func (m *model) Release(_ context.Context, c *Record[res]) error {
	if m.releaseFail {
		return errors.New("release failed")
	}
	if h := m.recs[c.Key]; h != nil && h.Pending && h.Claim == c.Claim {
		delete(m.recs, c.Key)
	}
	return nil
}

type running map[string]bool

func (r running) Running(c string) bool { return r[c] }

// TestDoProperty: whatever mix of requests, failed applies, failed
// releases and abandoned claims, a key's effect is applied at most once;
// a retry of the same request replays its results, another request under
// the key is ErrReuse; a failed apply leaves the key free (or, if its
// release failed too, an abandoned claim the same process takes over at
// once); another process's live claim makes a request wait (here: give
// up), one past its deadline is taken over.
func TestDoProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &model{recs: map[string]*Record[res]{}}
		active := running{}
		now := int64(1000)
		const lease = 100
		effects := map[string]int{}
		seq := 0
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key")
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0: // a claim another request left behind
				if m.recs[key] != nil {
					continue
				}
				seq++
				owner := rapid.SampledFrom([]string{"self", "other"}).Draw(t, "owner")
				c := &Record[res]{Key: key, FP: rapid.Uint64Range(1, 2).Draw(t, "fp"), Pending: true, Claim: fmt.Sprint("left-", seq), Owner: owner, Deadline: now + lease}
				m.recs[key] = c
				if owner == "self" && rapid.Bool().Draw(t, "still running") {
					active[c.Claim] = true
				}
			case 1:
				now += rapid.Int64Range(0, 2*lease).Draw(t, "tick")
			default:
				fp := rapid.Uint64Range(1, 2).Draw(t, "fp")
				fail := rapid.Bool().Draw(t, "apply fails")
				m.releaseFail = rapid.Bool().Draw(t, "release fails")
				before := m.recs[key]
				var prev Record[res]
				if before != nil {
					prev = *before
				}
				m.waits = 0
				applied := false
				q := Request{Key: key, FP: fp, Now: now, Lease: lease, Owner: "self", Clock: func() int64 { return now }}
				m.apply = func() ([]res, error) {
					applied = true
					if fail {
						return nil, errors.New("apply failed")
					}
					effects[key]++
					return []res{{V: int64(effects[key]), Note: key}}, nil
				}
				got, err := Do(context.Background(), m, q, active)
				after := m.recs[key]
				takeover := before != nil && before.Pending && before.FP == fp &&
					((before.Owner == "self" && !active[before.Claim]) || now > before.Deadline)
				switch {
				case before != nil && !before.Pending:
					want, werr := prev.Replay(key, fp)
					if applied || !reflect.DeepEqual(got, want) || (err == nil) != (werr == nil) {
						t.Fatalf("over a record %+v: got %+v, %v (applied %v); want %+v, %v", prev, got, err, applied, want, werr)
					}
					if fp != prev.FP && !errors.Is(err, ErrReuse) {
						t.Fatalf("another request under a recorded key: %v, want ErrReuse", err)
					}
				case before != nil && before.FP != fp:
					if applied || !errors.Is(err, ErrReuse) {
						t.Fatalf("another request under a claimed key: %v (applied %v), want ErrReuse", err, applied)
					}
				case before != nil && !takeover:
					if applied || !errors.Is(err, errBusy) || m.waits != 1 {
						t.Fatalf("under a live claim %+v: %+v, %v (applied %v, waits %d); want to wait", prev, got, err, applied, m.waits)
					}
					if after != before {
						t.Fatal("a live claim was replaced")
					}
				case takeover && m.releaseFail:
					if applied || err == nil {
						t.Fatalf("took over a claim it could not release: %v", err)
					}
				default: // the key was free, or its claim abandoned and released
					if !applied {
						t.Fatalf("did not apply: %+v, %v (before %+v)", got, err, before)
					}
					if fail {
						if err == nil {
							t.Fatal("a failed apply succeeded")
						}
						if !m.releaseFail && after != nil {
							t.Fatalf("a failed apply left %+v", after)
						}
						if m.releaseFail && (after == nil || !after.Pending || after.Owner != "self" || active[after.Claim]) {
							t.Fatalf("a failed release left %+v, want this process's abandoned claim", after)
						}
					} else if err != nil || len(got) != 1 || got[0].Replayed || after == nil || after.Pending || after.FP != fp || !reflect.DeepEqual(after.Results, got) {
						t.Fatalf("apply: %+v, %v; record %+v", got, err, after)
					}
				}
				if effects[key] > 1 {
					t.Fatalf("key %q applied %d times", key, effects[key])
				}
			}
		}
	})
}

// FuzzDecode: any bytes decode to a well-formed record that encodes back
// to the same record, or fail with ErrCorrupt; never a panic.
func FuzzDecode(f *testing.F) {
	ok := Record[res]{Key: "k", FP: 7, Created: 1, IDs: []string{"a"}, Results: []res{{V: 3, Note: "n"}}, Ext: []byte{1, 2}}
	f.Add(ok.Encode())
	f.Add((&Record[res]{FP: 1, Pending: true, Claim: "c", Owner: "o", Deadline: 9}).Encode())
	f.Add([]byte(`{"key":"k","fp":7,"created":1,"results":[{"V":3}]}`))
	f.Add([]byte(`{"fp":"x","results":[{}]}`))
	f.Add([]byte{formatV1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode[res](data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !r.Pending && len(r.Results) == 0 {
			t.Fatalf("accepted a record without results: %+v", r)
		}
		r2, err := Decode[res](r.Encode())
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, r2, err)
		}
	})
}

// TestRecordRoundTrip: every record survives its binary form exactly (nil
// and empty slices kept apart).
func TestRecordRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.StringN(0, 6, -1)
		r := Record[res]{
			Key: str.Draw(t, "key"), FP: rapid.Uint64().Draw(t, "fp"), Created: rapid.Int64().Draw(t, "created"),
			Pending: rapid.Bool().Draw(t, "pending"), Claim: str.Draw(t, "claim"), Owner: str.Draw(t, "owner"),
			Deadline: rapid.Int64().Draw(t, "deadline"),
		}
		if rapid.Bool().Draw(t, "ids") {
			r.IDs = rapid.SliceOfN(str, 0, 3).Draw(t, "idlist")
		}
		n := rapid.IntRange(0, 3).Draw(t, "results")
		if !r.Pending || n > 0 {
			r.Results = make([]res, max(n, 1))
			for i := range r.Results {
				r.Results[i] = res{V: rapid.Int64().Draw(t, "v"), Note: str.Draw(t, "note")}
			}
		}
		if rapid.Bool().Draw(t, "ext") {
			r.Ext = rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "extbytes")
		}
		got, err := Decode[res](r.Encode())
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip: %+v -> %+v, %v", r, got, err)
		}
	})
}

// TestDecodeJSON: a record stored as JSON before the binary form reads.
func TestDecodeJSON(t *testing.T) {
	got, err := Decode[res]([]byte(`{"fp":11395214067388251298,"created":1700000000000000000,"ids":["a"],"results":[{"V":5}]}`))
	want := Record[res]{FP: 11395214067388251298, Created: 1700000000000000000, IDs: []string{"a"}, Results: []res{{V: 5}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode = %+v, %v; want %+v", got, err, want)
	}
	if _, err := Decode[res]([]byte(`{"fp":1}`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record without results = %v, want ErrCorrupt", err)
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"", string(make([]byte, MaxKeyLen+1)), "a\nb", "a\x7f"} {
		if err := ValidateKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	if err := ValidateKey("retry-1 é"); err != nil {
		t.Errorf("ValidateKey of a good key = %v", err)
	}
}

func TestExpired(t *testing.T) {
	r := Record[res]{Created: 100}
	if r.Expired(100+int64(time.Second), time.Second) || !r.Expired(101+int64(time.Second), time.Second) {
		t.Fatal("Expired does not flip just past the retention")
	}
}
