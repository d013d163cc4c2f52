package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Every backend identifies a keyed request with Fingerprint and stores its
// outcome as an IdemRecord (JSON from Encode): the embedded engine in
// Pebble, the tiered mode in Redis, a cluster in the record it replicates
// with the state. So a key reused for another request is refused the same
// way everywhere, and a record written by one backend reads in another.

// IdemRecord is the outcome of one idempotent mutation.
type IdemRecord struct {
	Key     string `json:"key,omitempty"`
	FP      uint64 `json:"fp"`      // Fingerprint of the ops
	Created int64  `json:"created"` // unix ns, for the retention
	// Pending is set while the mutation is being applied (a backend that
	// claims a key before applying, like the tiered mode); Results is
	// empty then.
	Pending bool `json:"pending,omitempty"`
	// Claim, on a pending record, is a random token of the request that
	// wrote it: a claimer whose write was resent by its client library
	// recognises its own claim instead of waiting for it.
	Claim   string   `json:"claim,omitempty"`
	IDs     []string `json:"ids,omitempty"` // the ids the mutation wrote, when a backend indexes records by id
	Results []Result `json:"results,omitempty"`
}

// Encode returns the record's stored form.
func (r *IdemRecord) Encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("engine: idempotency record does not encode: %v", err))
	}
	return b
}

// DecodeIdemRecord parses a stored record. A malformed one is an error
// wrapping ErrCorrupt, never a replay.
func DecodeIdemRecord(b []byte) (IdemRecord, error) {
	var r IdemRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return IdemRecord{}, fmt.Errorf("%w: idempotency record: %v", ErrCorrupt, err)
	}
	if !r.Pending && len(r.Results) == 0 {
		return IdemRecord{}, fmt.Errorf("%w: idempotency record without results", ErrCorrupt)
	}
	return r, nil
}

// Replay returns the recorded results, marked Replayed, for a retry whose
// ops have fingerprint fp; a different fingerprint is ErrIdempotencyReuse.
func (r *IdemRecord) Replay(key string, fp uint64) ([]Result, error) {
	if r.FP != fp {
		return nil, fmt.Errorf("%w: %q", ErrIdempotencyReuse, key)
	}
	out := make([]Result, len(r.Results))
	copy(out, r.Results)
	for i := range out {
		out[i].Replayed = true
	}
	return out, nil
}

// Fingerprint identifies a request: equal ops give equal fingerprints, and
// a change to any field an op's result depends on changes it.
func Fingerprint(ops []Op) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for i := range ops {
		op := &ops[i]
		b = append(b[:0], byte(op.Type), byte(op.Kind), byte(op.SetMode), b2u8(op.CheckVersion), b2u8(op.KeepTTL), op.HLLPrecision, b2u8(op.Window.Fixed))
		if op.Estimate {
			// Only when set, so fingerprints stored before Estimate
			// counted still match.
			b = append(b, 0xe5)
		}
		if op.Float != "" || op.ExpireAt != 0 { // the same, for these
			b = append(b, 0xf1)
			str(op.Float)
			b = binary.AppendVarint(b, op.ExpireAt)
		}
		if op.At != 0 { // the event time; only when set, as above
			b = append(b, 0xa7)
			b = binary.AppendVarint(b, op.At)
		}
		for _, v := range [...]int64{op.Delta, op.Value, int64(op.ExpectedVersion), int64(op.TTL), int64(op.Window.Granularity), int64(op.Window.Span), int64(op.Shards), int64(op.Shard)} {
			b = binary.AppendVarint(b, v)
		}
		str(op.ID)
		b = binary.AppendUvarint(b, uint64(len(op.Items)))
		for _, it := range op.Items {
			str(string(it))
		}
		b = binary.AppendUvarint(b, uint64(len(op.Sources)))
		for _, s := range op.Sources {
			str(s)
		}
		b = binary.AppendUvarint(b, uint64(len(op.Fields)))
		for _, f := range op.Fields {
			str(f.Name)
			b = binary.AppendVarint(b, f.Delta)
			if f.Float != "" { // only then, so older fingerprints still match
				b = append(b, 0xf2)
				str(f.Float)
			}
		}
		b = binary.AppendUvarint(b, uint64(len(op.Names)))
		for _, n := range op.Names {
			str(n)
		}
		d.Write(b)
	}
	return d.Sum64()
}

func b2u8(v bool) byte {
	if v {
		return 1
	}
	return 0
}
