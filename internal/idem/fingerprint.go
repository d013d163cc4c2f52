package idem

import "github.com/cespare/xxhash/v2"

// Fingerprint identifies a request: the hash of each op's bytes as
// appendOp writes them (into a buffer reused between ops). Equal ops must
// append equal bytes, and a change to any field an op's result depends on
// must change them (length-prefix variable fields so they cannot shift
// into each other).
func Fingerprint[O any](ops []O, appendOp func(b []byte, op *O) []byte) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [128]byte
	b := buf[:0]
	for i := range ops {
		b = appendOp(b[:0], &ops[i])
		d.Write(b)
	}
	return d.Sum64()
}
