package idem

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

var (
	// ErrReuse: a key was reused with a different request.
	ErrReuse = errors.New("engine: idempotency key reused with a different request")
	// ErrCorrupt: stored bytes are not one record.
	ErrCorrupt = errors.New("idempotency record corrupt")
	// ErrInvalidKey: a key is empty, too long or has a control byte.
	ErrInvalidKey = errors.New("invalid idempotency key")
)

// MaxKeyLen bounds an idempotency key.
const MaxKeyLen = 255

// ValidateKey checks a key: 1..MaxKeyLen bytes, none a control byte.
func ValidateKey(k string) error {
	if k == "" || len(k) > MaxKeyLen {
		return fmt.Errorf("%w: idempotency key must be 1..%d bytes", ErrInvalidKey, MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] == 0x7f {
			return fmt.Errorf("%w: idempotency key has a control byte", ErrInvalidKey)
		}
	}
	return nil
}

// Outcome is what a record holds per op: a backend's result type, which
// encodes itself in the record's binary form and marks a copy replayed.
// The methods have value receivers so a zero R can decode (ReadIdem).
type Outcome[R any] interface {
	// AppendIdem appends the result's binary form.
	AppendIdem(b []byte) []byte
	// ReadIdem reads one result written by AppendIdem (errors stick in d).
	ReadIdem(d *Reader) R
	// AsReplayed returns a copy marked as coming from a record.
	AsReplayed() R
}

// Record is the outcome of one idempotent mutation, or, while Pending, a
// request's claim on its key.
type Record[R Outcome[R]] struct {
	Key     string `json:"key,omitempty"`
	FP      uint64 `json:"fp"`      // Fingerprint of the ops
	Created int64  `json:"created"` // unix ns, for the retention
	// Pending is set while the mutation is being applied (a backend
	// whose store is shared by several processes claims a key before
	// applying); Results is empty then.
	Pending bool `json:"pending,omitempty"`
	// Claim, on a pending record, is a random token of the request that
	// wrote it: a claimer whose write was resent by its client library
	// recognises its own claim instead of waiting for it.
	Claim string `json:"claim,omitempty"`
	// Owner, on a pending record, names the process that claimed it, and
	// Deadline (unix ns) is when the claim is abandoned at the latest: the
	// owner knows at once that a claim it no longer runs is abandoned
	// (its release failed); another process waits until Deadline.
	Owner    string   `json:"owner,omitempty"`
	Deadline int64    `json:"deadline,omitempty"`
	IDs      []string `json:"ids,omitempty"` // the ids the mutation wrote, when a backend indexes records by id
	Results  []R      `json:"results,omitempty"`
	// Ext is a backend's own data beside the record (a cluster's origin,
	// undo and write versions), opaque here.
	Ext []byte `json:"-"`
}

// Expired reports whether the record is older than retention at now
// (unix ns).
func (r *Record[R]) Expired(now int64, retention time.Duration) bool {
	return now-r.Created > int64(retention)
}

// Replay returns the recorded results, marked replayed, for a retry whose
// ops have fingerprint fp; a different fingerprint is ErrReuse.
func (r *Record[R]) Replay(key string, fp uint64) ([]R, error) {
	if r.FP != fp {
		return nil, fmt.Errorf("%w: %q", ErrReuse, key)
	}
	out := make([]R, len(r.Results))
	for i := range r.Results {
		out[i] = r.Results[i].AsReplayed()
	}
	return out, nil
}

// The binary form: formatV1, then the fields in order. A slice is its
// length plus one (0: nil, so a record round-trips exactly), then its
// items. Records stored before it are JSON (they start with '{').
const formatV1 = 0xb1

const (
	flagPending = 1 << iota
)

// Encode returns the record's stored form.
func (r *Record[R]) Encode() []byte {
	b := make([]byte, 0, 64+len(r.Key)+len(r.Ext)+32*len(r.Results))
	var flags byte
	if r.Pending {
		flags |= flagPending
	}
	b = append(b, formatV1, flags)
	b = AppendString(b, r.Key)
	b = binary.LittleEndian.AppendUint64(b, r.FP)
	b = binary.AppendVarint(b, r.Created)
	b = AppendString(b, r.Claim)
	b = AppendString(b, r.Owner)
	b = binary.AppendVarint(b, r.Deadline)
	b = appendLen(b, r.IDs == nil, len(r.IDs))
	for _, id := range r.IDs {
		b = AppendString(b, id)
	}
	b = appendLen(b, r.Results == nil, len(r.Results))
	for i := range r.Results {
		b = r.Results[i].AppendIdem(b)
	}
	b = appendLen(b, r.Ext == nil, len(r.Ext))
	return append(b, r.Ext...)
}

func appendLen(b []byte, isNil bool, n int) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

// Decode parses a stored record, binary or (stored before the binary form)
// JSON. A malformed one is an error wrapping ErrCorrupt, never a replay.
func Decode[R Outcome[R]](b []byte) (Record[R], error) {
	var r Record[R]
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &r); err != nil {
			return Record[R]{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
	} else if err := r.decodeBinary(b); err != nil {
		return Record[R]{}, err
	}
	if !r.Pending && len(r.Results) == 0 {
		return Record[R]{}, fmt.Errorf("%w: a record without results", ErrCorrupt)
	}
	return r, nil
}

func (r *Record[R]) decodeBinary(b []byte) error {
	if len(b) < 2 || b[0] != formatV1 || b[1]&^flagPending != 0 {
		return fmt.Errorf("%w: not a record", ErrCorrupt)
	}
	r.Pending = b[1]&flagPending != 0
	d := Reader{b: b[2:]}
	r.Key = d.String()
	r.FP = d.Uint64()
	r.Created = d.Varint()
	r.Claim = d.String()
	r.Owner = d.String()
	r.Deadline = d.Varint()
	if n, ok := d.Len(1); ok {
		r.IDs = make([]string, n)
		for i := range r.IDs {
			r.IDs[i] = d.String()
		}
	}
	if n, ok := d.Len(1); ok {
		r.Results = make([]R, n)
		var z R
		for i := range r.Results {
			r.Results[i] = z.ReadIdem(&d)
		}
	}
	if n, ok := d.Len(1); ok {
		r.Ext = d.Bytes(n)
	}
	return d.Done()
}

// AppendString appends s with its length.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Reader reads a record's binary form. The first error sticks: later reads
// return zero values, and Done reports it.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

func (d *Reader) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

// Uvarint reads an unsigned varint.
func (d *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a signed varint.
func (d *Reader) Varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Uint64 reads 8 bytes, little endian.
func (d *Reader) Uint64() uint64 {
	if len(d.b) < 8 {
		d.fail("short")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// Byte reads one byte.
func (d *Reader) Byte() byte {
	if len(d.b) < 1 {
		d.fail("short")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Bool reads a byte that must be 0 or 1.
func (d *Reader) Bool() bool {
	switch d.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad bool")
	return false
}

// Bytes reads n bytes (a copy).
func (d *Reader) Bytes(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.fail("short")
		return nil
	}
	v := append([]byte{}, d.b[:n]...)
	d.b = d.b[n:]
	return v
}

// String reads a string written by AppendString.
func (d *Reader) String() string {
	n := d.Uvarint()
	if n > uint64(len(d.b)) {
		d.fail("short string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// Len reads a slice length written as length plus one; ok is false for a
// nil slice (or an error). Each item takes at least minItem bytes, so a
// corrupt length cannot allocate more than the input holds.
func (d *Reader) Len(minItem int) (n int, ok bool) {
	v := d.Uvarint()
	if v == 0 || d.err != nil {
		return 0, false
	}
	v--
	if v > math.MaxInt32 || int(v)*max(minItem, 0) > len(d.b) {
		d.fail("length past the end")
		return 0, false
	}
	return int(v), true
}

// Done reports the first error, or trailing bytes.
func (d *Reader) Done() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	return d.err
}

// Err reports the first error so far.
func (d *Reader) Err() error { return d.err }
