package idem

import "github.com/cespare/xxhash/v2"

// Fingerprinter hashes a request into its fingerprint, one op's bytes at
// a time: equal ops must give equal bytes, and a change to any field an
// op's result depends on must change them (length-prefix variable fields
// so they cannot shift into each other). A caller keeps its own buffer
// for an op's bytes (on its stack).
type Fingerprinter struct{ d xxhash.Digest }

// NewFingerprinter starts a fingerprint.
func NewFingerprinter() Fingerprinter {
	var f Fingerprinter
	f.d.Reset()
	return f
}

// Op adds one op's bytes.
func (f *Fingerprinter) Op(b []byte) { _, _ = f.d.Write(b) }

// Sum is the fingerprint of the ops added.
func (f *Fingerprinter) Sum() uint64 { return f.d.Sum64() }
