package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/idem"
)

// Every backend identifies a keyed request with Fingerprint and stores its
// outcome as an IdemRecord, in the one record format of package idem: the
// embedded engine in Pebble, the tiered mode in Redis, a cluster in the
// record it replicates with the state. So a key reused for another
// request is refused the same way everywhere, and a record written by one
// backend reads in another.

// IdemRecord is the outcome of one idempotent mutation.
type IdemRecord = idem.Record[contract.Result]

// DecodeIdemRecord parses a stored record (the binary form, or the JSON
// stored before it). A malformed one is an error wrapping ErrCorrupt,
// never a replay.
func DecodeIdemRecord(b []byte) (IdemRecord, error) {
	r, err := idem.Decode[contract.Result](b)
	if err != nil {
		return IdemRecord{}, fmt.Errorf("%w: idempotency record: %v", ErrCorrupt, err)
	}
	return r, nil
}

// Fingerprint identifies a request: equal ops give equal fingerprints, and
// a change to any field an op's result depends on changes it.
func Fingerprint(ops []contract.Op) uint64 {
	f := idem.NewFingerprinter()
	var buf [128]byte
	for i := range ops {
		f.Op(appendFingerprint(buf[:0], &ops[i]))
	}
	return f.Sum()
}

// appendFingerprint appends the bytes op is fingerprinted by (unchanged
// since records were first stored, so stored fingerprints still match).
func appendFingerprint(b []byte, op *contract.Op) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, byte(op.Type), byte(op.Kind), byte(op.SetMode), contract.B2u8(op.CheckVersion), contract.B2u8(op.KeepTTL), op.HLLPrecision, contract.B2u8(op.Window.Fixed))
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
	return b
}
