package counter

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// HLL precision bounds and default. A sketch of precision p has m = 2^p
// registers and a relative standard error of 1.04/sqrt(m): 0.81% at p = 14.
const (
	MinPrecision     uint8 = 4
	MaxPrecision     uint8 = 18
	DefaultPrecision uint8 = 14
)

// ValidatePrecision returns an error wrapping ErrInvalid unless p is in
// [MinPrecision, MaxPrecision].
func ValidatePrecision(p uint8) error {
	if p < MinPrecision || p > MaxPrecision {
		return fmt.Errorf("%w: hll precision %d outside [%d, %d]", ErrInvalid, p, MinPrecision, MaxPrecision)
	}
	return nil
}

// HLL is a HyperLogLog sketch: it estimates the number of distinct items
// added to it in at most 2^p bytes.
//
// How: an item is hashed with xxhash64; the top p bits pick one of m = 2^p
// registers and the register keeps the maximum "rank" seen, the position of
// the first 1 bit in the remaining 64-p bits (1..65-p). Count applies Otmar
// Ertl's improved raw estimator ("New cardinality estimation algorithms for
// HyperLogLog sketches", 2017, the one Redis uses) to the histogram of
// register values; it needs no empirical bias tables and stays within the
// usual 1.04/sqrt(m) relative standard error from 0 to far beyond 2^32.
// Registers are the same as those of github.com/axiomhq/hyperloglog fed the
// same hashes (its dense Sketch with InsertHash); this package keeps its own
// registers because that library offers no way to tell whether an insert
// changed a register (comparing its estimates costs O(m) per item), nor to
// read registers to fold precisions, and so that the stored format does not
// depend on a library's.
//
// Small sketches are sparse: the non-zero registers in index order, each
// held as the uvarint of (index - previous index)<<6 | rank in one byte
// slice sized to fit (about 2 bytes per register at p = 14 and n = 100,
// against 4 for a uint32 list), read by a linear scan. A sparse sketch turns
// into a dense byte per register once it has more than 2^p/4 non-zero
// registers (as before: when a 4-byte list would be larger than that) or its
// entries take more than min(2^p/2, 3000) bytes (3000 is Redis's default
// hll-sparse-max-bytes), which bounds the scan an Add does on a sparse
// sketch to a few hundred nanoseconds.
//
// Merging sketches of different precisions is supported: the finer sketch is
// folded down to the coarser precision, which is exact (the result equals
// the sketch the coarser precision would have built from the same items), so
// a Merge may lower the receiver's precision. ErrPrecision is only returned
// by Fold when asked to raise the precision.
//
// The zero value is an empty sketch of precision DefaultPrecision. An HLL is
// not safe for concurrent use: the caller serialises access. Count,
// Precision, StdError, Registers, Clone and MarshalBinary do not modify the
// receiver, so concurrent readers are fine under a read lock.
type HLL struct {
	p     uint8
	dense bool
	n     uint32 // sparse: number of entries (non-zero registers)
	// shared: regs is also an HLLUndo's copy of the sketch (BeginUndo),
	// so it is copied before it is written in place (own).
	shared bool
	regs   []uint8 // dense: m registers; sparse: the entries (see sparseNext)
}

// Peek reads the sketch's fields and the first and last lines of its
// registers (a sparse sketch's entries, which an add scans) and returns
// a sum of them. It changes nothing: a caller about to add to many
// sketches peeks at them all first, so that their cache misses overlap
// rather than come one after another.
func (h *HLL) Peek() int64 {
	if len(h.regs) == 0 {
		return int64(h.n)
	}
	return int64(h.regs[0]) + int64(h.regs[len(h.regs)-1])
}

// HLLUndo can put a sketch back as it was when BeginUndo was called,
// without copying its registers up front: the sketch keeps them until it
// would write them in place, and then writes a copy (copy on write), so
// that a sketch the batch does not change, or changes by building new
// entries (AddHashes on a sparse sketch), costs no copy. The engine's
// atomic batches use it to undo a failed batch. Reusable.
type HLLUndo struct {
	h   *HLL
	old HLL
}

// BeginUndo makes u able to put h back as it is now, until u.Rollback
// or u.End. The caller serialises access to h, as for any write.
func (h *HLL) BeginUndo(u *HLLUndo) {
	h.shared = true
	*u = HLLUndo{h: h, old: *h}
}

// Rollback puts the sketch back as it was at BeginUndo.
func (u *HLLUndo) Rollback() {
	if u.h != nil {
		*u.h = u.old
		u.h.shared = false
	}
	*u = HLLUndo{}
}

// End forgets the copy; the sketch keeps its writes.
func (u *HLLUndo) End() {
	if u.h != nil {
		// (A sketch that wrote no copy still shares its registers with
		// u.old, which is dropped: they are its own again.)
		u.h.shared = false
	}
	*u = HLLUndo{}
}

// own makes h.regs h's alone before a write in place (see HLLUndo).
func (h *HLL) own() {
	if h.shared {
		h.regs = slices.Clone(h.regs)
		h.shared = false
	}
}

const rankBits = 6 // ranks are at most 65-MinPrecision = 61 < 64

// NewHLL returns an empty sketch of the given precision, or an error
// wrapping ErrInvalid if ValidatePrecision rejects it.
func NewHLL(precision uint8) (*HLL, error) {
	if err := ValidatePrecision(precision); err != nil {
		return nil, err
	}
	return &HLL{p: precision}, nil
}

func (h *HLL) init() {
	if h.p == 0 {
		h.p = DefaultPrecision
	}
}

// Precision returns the sketch's precision p (it has 2^p registers).
func (h *HLL) Precision() uint8 {
	if h.p == 0 {
		return DefaultPrecision
	}
	return h.p
}

// StdError returns the relative standard error of Count, 1.04/sqrt(2^p).
func (h *HLL) StdError() float64 {
	return 1.04 / math.Sqrt(float64(uint32(1)<<h.Precision()))
}

// sparseMax is the most entries a sparse sketch holds before it turns dense
// (beyond it a list of 4-byte entries would take more room than m register
// bytes), and sparseMaxBytes the most bytes its entries take: min(m/2,
// 3000) like Redis's hll-sparse-max-bytes, which bounds the linear scan of a
// sparse Add.
func sparseMax(p uint8) int { return 1 << p / 4 }

func sparseMaxBytes(p uint8) int { return min(1<<p/2, 3000) }

// sparseFull reports whether a sparse sketch must turn dense.
func (h *HLL) sparseFull() bool {
	return int(h.n) > sparseMax(h.p) || len(h.regs) > sparseMaxBytes(h.p)
}

// sparseNext decodes the sparse entry at b[pos:], the uvarint of
// (index - previous index)<<rankBits | rank (the first entry's previous index
// is 0), and returns it with the offset of the next entry. Entries are below
// 2^(MaxPrecision+rankBits), at most 4 bytes.
func sparseNext(b []byte, pos int) (v uint32, next int) {
	var s uint
	for {
		c := b[pos]
		pos++
		if c < 0x80 {
			return v | uint32(c)<<s, pos
		}
		v |= uint32(c&0x7f) << s
		s += 7
	}
}

// appendEntry appends the sparse entry of a register delta above the
// previous index with rank r.
func appendEntry(b []byte, delta uint32, r uint8) []byte {
	return binary.AppendUvarint(b, uint64(delta<<rankBits|uint32(r)))
}

// splice replaces the sparse bytes h.regs[from:to] with enc. When the slice
// must grow it is reallocated to just the new length (rounded up to the
// allocator's size class), so a sparse sketch carries little slack.
func (h *HLL) splice(from, to int, enc []byte) {
	b := h.regs
	n := len(b) - (to - from) + len(enc)
	if n > cap(b) || h.shared { // (shared: write a copy, see HLLUndo)
		nb := slices.Grow([]byte(nil), n)[:n]
		copy(nb, b[:from])
		copy(nb[from:], enc)
		copy(nb[from+len(enc):], b[to:])
		h.regs, h.shared = nb, false
		return
	}
	tail := b[to:]
	if n > len(b) {
		b = b[:n]
	}
	copy(b[from+len(enc):], tail)
	copy(b[from:], enc)
	h.regs = b[:n]
}

// setSparse makes h sparse with entries e (index<<rankBits | rank, sorted,
// unique index), or dense if they are too many.
func (h *HLL) setSparse(e []uint32) {
	size, prev := 0, uint32(0)
	for _, x := range e {
		i := x >> rankBits
		size += uvarintLen(uint64((i-prev)<<rankBits | x&(1<<rankBits-1)))
		prev = i
	}
	var b []byte
	if size > 0 {
		b = make([]byte, 0, size)
	}
	prev = 0
	for _, x := range e {
		i := x >> rankBits
		b = appendEntry(b, i-prev, uint8(x&(1<<rankBits-1)))
		prev = i
	}
	h.regs, h.n, h.dense, h.shared = b, uint32(len(e)), false, false
	if h.sparseFull() {
		h.toDense()
	}
}

// sparseEntries returns the sparse entries as index<<rankBits | rank, with
// room for extra more.
func (h *HLL) sparseEntries(extra int) []uint32 {
	e := make([]uint32, 0, int(h.n)+extra)
	h.each(func(i uint32, r uint8) { e = append(e, i<<rankBits|uint32(r)) })
	return e
}

// position returns the register index and rank of hash x at precision p.
func position(x uint64, p uint8) (uint32, uint8) {
	i := uint32(x >> (64 - p))
	w := x<<p | 1<<(p-1)
	return i, uint8(bits.LeadingZeros64(w)) + 1
}

// Add adds item to the sketch and reports whether a register changed, that
// is whether the estimate may have changed (Redis PFADD's reply). It does not
// allocate once the sketch is dense.
func (h *HLL) Add(item []byte) bool {
	return h.AddHash(xxhash.Sum64(item))
}

// AddHash adds an item by its 64-bit hash, which must be uniformly
// distributed (Add uses xxhash64 of the item). It reports whether a register
// changed.
func (h *HLL) AddHash(x uint64) bool {
	h.init()
	i, r := position(x, h.p)
	return h.set(i, r)
}

// set raises register i to rank r and reports whether it changed.
func (h *HLL) set(i uint32, r uint8) bool {
	if h.dense {
		if r > h.regs[i] {
			h.own()
			h.regs[i] = r
			return true
		}
		return false
	}
	b := h.regs
	var tmp [2 * binary.MaxVarintLen32]byte
	prev, pos := uint32(0), 0
	for pos < len(b) {
		v, next := sparseNext(b, pos)
		idx := prev + v>>rankBits
		if idx == i {
			if r <= uint8(v&(1<<rankBits-1)) {
				return false
			}
			// Same length: the delta is unchanged and r fits in rankBits
			// (a zero delta gives a 1-byte entry either way).
			h.own()
			binary.PutUvarint(h.regs[pos:next], uint64(v&^(1<<rankBits-1)|uint32(r)))
			return true
		}
		if idx > i {
			// Insert before this entry, whose delta becomes idx-i.
			enc := appendEntry(tmp[:0], i-prev, r)
			enc = appendEntry(enc, idx-i, uint8(v&(1<<rankBits-1)))
			h.splice(pos, next, enc)
			return h.inserted()
		}
		prev, pos = idx, next
	}
	h.splice(len(b), len(b), appendEntry(tmp[:0], i-prev, r))
	return h.inserted()
}

// inserted accounts for a new sparse entry, turns h dense if it is now too
// large, and returns true.
func (h *HLL) inserted() bool {
	h.n++
	if h.sparseFull() {
		h.toDense()
	}
	return true
}

func (h *HLL) toDense() {
	regs := make([]uint8, 1<<h.p)
	h.each(func(i uint32, r uint8) { regs[i] = r })
	h.regs, h.n, h.dense, h.shared = regs, 0, true, false
}

// each calls fn for every non-zero register, in index order.
func (h *HLL) each(fn func(i uint32, r uint8)) {
	if h.dense {
		for i, r := range h.regs {
			if r != 0 {
				fn(uint32(i), r)
			}
		}
		return
	}
	b := h.regs
	prev := uint32(0)
	for pos := 0; pos < len(b); {
		var v uint32
		v, pos = sparseNext(b, pos)
		prev += v >> rankBits
		fn(prev, uint8(v&(1<<rankBits-1)))
	}
}

// Registers returns a copy of the sketch's 2^p registers, register i at
// index i, whether the sketch is held sparse or dense. With Precision it is
// what NewHLLFromRegisters takes back.
func (h *HLL) Registers() []uint8 {
	if h.dense {
		return slices.Clone(h.regs)
	}
	regs := make([]uint8, 1<<h.Precision())
	h.each(func(i uint32, r uint8) { regs[i] = r })
	return regs
}

// NewHLLFromRegisters returns the sketch of precision p with registers regs
// (register i at index i, as Registers returns them); regs is not retained.
// It returns an error wrapping ErrInvalid, and no sketch, for an invalid p,
// a length other than 2^p, or a register above 65-p, the highest rank of
// precision p. The sketch is held sparse when few registers are set, as a
// decoded one is.
func NewHLLFromRegisters(p uint8, regs []uint8) (*HLL, error) {
	if err := ValidatePrecision(p); err != nil {
		return nil, err
	}
	if m := 1 << p; len(regs) != m {
		return nil, fmt.Errorf("%w: %d hll registers, precision %d has %d", ErrInvalid, len(regs), p, m)
	}
	maxRank := 65 - p
	for i, r := range regs {
		if r > maxRank {
			return nil, fmt.Errorf("%w: hll register %d has rank %d above %d", ErrInvalid, i, r, maxRank)
		}
	}
	h := &HLL{p: p, dense: true, regs: slices.Clone(regs)}
	h.sparseIfSmall()
	return h, nil
}

// sparseIfSmall turns a dense sketch with few non-zero registers sparse, so
// that a sketch built from registers is held as one built by adding items.
func (h *HLL) sparseIfSmall() {
	if nz := h.nonZero(); nz <= sparseMax(h.p) {
		entries := make([]uint32, 0, nz)
		h.each(func(i uint32, r uint8) { entries = append(entries, i<<rankBits|uint32(r)) })
		h.setSparse(entries)
	}
}

// nonZero returns the number of non-zero registers.
func (h *HLL) nonZero() int {
	if !h.dense {
		return int(h.n)
	}
	n := 0
	for _, r := range h.regs {
		if r != 0 {
			n++
		}
	}
	return n
}

// Count returns the estimated number of distinct items added.
func (h *HLL) Count() uint64 {
	p := h.Precision()
	m := 1 << p
	q := 64 - int(p)
	var hist [66]int // register values 0..q+1 <= 61
	if h.dense {
		for _, r := range h.regs {
			hist[r]++
		}
	} else {
		hist[0] = m - int(h.n)
		h.each(func(_ uint32, r uint8) { hist[r]++ })
	}
	if hist[0] == m {
		return 0
	}
	mf := float64(m)
	z := mf * hllTau(float64(m-hist[q+1])/mf)
	for k := q; k >= 1; k-- {
		z += float64(hist[k])
		z *= 0.5
	}
	z += mf * hllSigma(float64(hist[0])/mf)
	const alphaInf = 0.5 / math.Ln2
	return uint64(math.Round(alphaInf * mf * mf / z))
}

// hllSigma and hllTau are the series of Ertl's improved estimator.
func hllSigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	y, z := 1.0, x
	for {
		x *= x
		prev := z
		z += x * y
		y += y
		if z == prev {
			return z
		}
	}
}

func hllTau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	y, z := 1.0, 1-x
	for {
		x = math.Sqrt(x)
		prev := z
		y *= 0.5
		z -= (1 - x) * (1 - x) * y
		if z == prev {
			return z / 3
		}
	}
}

// foldPosition maps register i with rank r at precision from to the register
// and rank it would have at the coarser precision to: the dropped low bits
// of the index become the leading bits of the rest of the hash.
func foldPosition(i uint32, r uint8, from, to uint8) (uint32, uint8) {
	shift := from - to
	d := i & (1<<shift - 1)
	if d != 0 {
		return i >> shift, shift - uint8(bits.Len32(d)) + 1
	}
	return i >> shift, r + shift
}

// Fold lowers the sketch's precision to p, exactly as if every item had been
// added at precision p. It returns an error wrapping ErrInvalid for an
// invalid p and one wrapping ErrPrecision when p is above the current
// precision; then nothing changes.
func (h *HLL) Fold(p uint8) error {
	if err := ValidatePrecision(p); err != nil {
		return err
	}
	h.init()
	if p > h.p {
		return fmt.Errorf("%w: cannot raise precision %d to %d", ErrPrecision, h.p, p)
	}
	h.fold(p)
	return nil
}

func (h *HLL) fold(p uint8) {
	if p == h.p {
		return
	}
	from := h.p
	if h.dense {
		regs := make([]uint8, 1<<p)
		for i, r := range h.regs {
			if r != 0 {
				j, s := foldPosition(uint32(i), r, from, p)
				regs[j] = max(regs[j], s)
			}
		}
		h.p, h.regs, h.shared = p, regs, false
		return
	}
	out := make([]uint32, 0, h.n)
	h.each(func(i uint32, r uint8) {
		j, s := foldPosition(i, r, from, p)
		out = append(out, j<<rankBits|uint32(s))
	})
	h.p = p
	h.setSparse(compactSparse(out))
}

// compactSparse sorts entries and keeps the highest rank of each index.
func compactSparse(e []uint32) []uint32 {
	slices.Sort(e)
	out := e[:0]
	for k, v := range e {
		if k+1 < len(e) && e[k+1]>>rankBits == v>>rankBits {
			continue // a higher rank of the same index follows
		}
		out = append(out, v)
	}
	return out
}

// Merge folds o into h, so that h estimates the size of the union. If o has
// a lower precision than h, h is first folded down to it (see Fold); if o's
// is higher, o's registers are folded as they are read (o is not modified).
// A nil o does nothing. Merge is commutative, associative and idempotent
// (on registers, hence on Count). It currently never fails.
func (h *HLL) Merge(o *HLL) error {
	if o == nil || o == h {
		return nil
	}
	h.init()
	op := o.Precision()
	if op < h.p {
		h.fold(op)
	}
	p := h.p
	if !h.dense && !o.dense {
		entries := h.sparseEntries(int(o.n))
		o.each(func(i uint32, r uint8) {
			if op != p {
				i, r = foldPosition(i, r, op, p)
			}
			entries = append(entries, i<<rankBits|uint32(r))
		})
		h.setSparse(compactSparse(entries))
		return nil
	}
	if !h.dense {
		h.toDense()
	}
	h.own()
	if op == p && o.dense {
		for i, r := range o.regs {
			h.regs[i] = max(h.regs[i], r)
		}
		return nil
	}
	o.each(func(i uint32, r uint8) {
		if op != p {
			i, r = foldPosition(i, r, op, p)
		}
		h.regs[i] = max(h.regs[i], r)
	})
	return nil
}

// Clone returns a deep copy of h.
func (h *HLL) Clone() *HLL {
	return &HLL{p: h.p, dense: h.dense, n: h.n, regs: slices.Clone(h.regs)}
}

// HLL encoding layouts (byte 2 of the encoding).
const (
	hllSparse byte = 0
	hllDense  byte = 1
)

// MarshalBinary encodes h as: format byte 0x31, precision p, layout byte,
// then either (layout 0, sparse) a uvarint count of non-zero registers and
// per register in index order the uvarint gap from the previous index (the
// first index itself) and the rank byte, or (layout 1, dense) the 2^p
// registers packed in 6 bits each, little-endian, 3 bytes per 4 registers.
// The layout is the smaller of the two, so that sketches with the same
// registers have equal encodings. At most 3/4 * 2^p + 3 bytes (12291 at
// p = 14).
func (h *HLL) MarshalBinary() ([]byte, error) {
	p := h.Precision()
	m := 1 << p
	denseSize := 3 + m/4*3
	nz := h.nonZero()
	sparseSize := 3 + uvarintLen(uint64(nz))
	prev := uint32(0)
	h.each(func(i uint32, _ uint8) {
		sparseSize += uvarintLen(uint64(i-prev)) + 1
		prev = i
	})
	if sparseSize < denseSize {
		b := make([]byte, 0, sparseSize)
		b = append(b, formatHLL, p, hllSparse)
		b = binary.AppendUvarint(b, uint64(nz))
		prev = 0
		h.each(func(i uint32, r uint8) {
			b = binary.AppendUvarint(b, uint64(i-prev))
			b = append(b, r)
			prev = i
		})
		return b, nil
	}
	regs := h.regs
	if !h.dense {
		regs = h.Registers()
	}
	b := make([]byte, 3, denseSize)
	b[0], b[1], b[2] = formatHLL, p, hllDense
	for k := 0; k < m; k += 4 {
		v := uint32(regs[k]) | uint32(regs[k+1])<<6 | uint32(regs[k+2])<<12 | uint32(regs[k+3])<<18
		b = append(b, byte(v), byte(v>>8), byte(v>>16))
	}
	return b, nil
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// UnmarshalBinary replaces h with the decoded sketch. Input that is not a
// valid encoding (unknown format or layout, precision out of range, indexes
// out of range or not increasing, ranks above 65-p, trailing bytes, ...)
// returns an error wrapping ErrCorrupt and leaves h unchanged. It allocates
// at most 2^p bytes plus what the input length allows.
func (h *HLL) UnmarshalBinary(data []byte) error {
	d, err := newDecoder("hll", data, formatHLL)
	if err != nil {
		return err
	}
	p, err := d.byte()
	if err != nil {
		return err
	}
	if ValidatePrecision(p) != nil {
		return d.errorf("precision %d outside [%d, %d]", p, MinPrecision, MaxPrecision)
	}
	layout, err := d.byte()
	if err != nil {
		return err
	}
	m := 1 << p
	maxRank := 65 - p
	out := HLL{p: p}
	switch layout {
	case hllSparse:
		n, err := d.count("registers", 2)
		if err != nil {
			return err
		}
		if n > m {
			return d.errorf("%d registers, precision %d has %d", n, p, m)
		}
		entries := make([]uint32, 0, n)
		idx := uint64(0)
		for k := range n {
			gap, err := d.uvarint()
			if err != nil {
				return err
			}
			if k > 0 && gap == 0 {
				return d.errorf("register index does not increase after %d", idx)
			}
			if gap >= uint64(m) || idx+gap >= uint64(m) {
				return d.errorf("register index beyond %d", m-1)
			}
			idx += gap
			r, err := d.byte()
			if err != nil {
				return err
			}
			if r == 0 || r > maxRank {
				return d.errorf("register %d has rank %d outside [1, %d]", idx, r, maxRank)
			}
			entries = append(entries, uint32(idx)<<rankBits|uint32(r))
		}
		out.setSparse(entries)
	case hllDense:
		packed, err := d.bytes(m / 4 * 3)
		if err != nil {
			return err
		}
		out.regs, out.dense = make([]uint8, m), true
		for k := 0; k < m; k += 4 {
			v := uint32(packed[k/4*3]) | uint32(packed[k/4*3+1])<<8 | uint32(packed[k/4*3+2])<<16
			for j := range 4 {
				r := uint8(v >> (6 * j) & 63)
				if r > maxRank {
					return d.errorf("register %d has rank %d above %d", k+j, r, maxRank)
				}
				out.regs[k+j] = r
			}
		}
		out.sparseIfSmall()
	default:
		return d.errorf("unknown layout %d", layout)
	}
	if err := d.end(); err != nil {
		return err
	}
	*h = out
	return nil
}

// hashBlock is how many hashes AddHashes merges into a sparse sketch at
// once (its working space is on the stack).
const hashBlock = 64

// AddHashes is AddHash of each of xs, and reports whether a register
// changed; the registers end as after the AddHash calls in any order. A
// sparse sketch takes the hashes in blocks, each merged with its entries
// in one pass (the block's entries sorted), rather than a scan of its
// entries (and a splice) per hash.
func (h *HLL) AddHashes(xs []uint64) bool {
	h.init()
	changed := false
	for len(xs) > 0 {
		if h.dense || len(xs) == 1 {
			for _, x := range xs {
				if h.AddHash(x) {
					changed = true
				}
			}
			return changed
		}
		n := min(len(xs), hashBlock)
		if h.mergeSparse(xs[:n]) {
			changed = true
		}
		xs = xs[n:]
	}
	return changed
}

// mergeSparse adds the hashes xs (at most hashBlock) to the sparse h and
// reports whether a register changed: a first pass over the entries up to
// the block's highest index finds whether any register rises (most blocks
// of a sketch that has seen its items change nothing, and stop there);
// only then a second builds the merged entries.
func (h *HLL) mergeSparse(xs []uint64) bool {
	var ebuf [hashBlock]uint32
	add := ebuf[:0]
	for _, x := range xs {
		i, r := position(x, h.p)
		add = append(add, i<<rankBits|uint32(r))
	}
	slices.Sort(add) // by index, then rank
	// Keep the highest rank of each index: the last of its run.
	w := 0
	for k := range add {
		if k+1 < len(add) && add[k+1]>>rankBits == add[k]>>rankBits {
			continue
		}
		add[w] = add[k]
		w++
	}
	add = add[:w]
	const rankMask = 1<<rankBits - 1
	b := h.regs
	rises := false
	prev, pos := uint32(0), 0
	for _, e := range add {
		ai := e >> rankBits
		for pos < len(b) {
			v, next := sparseNext(b, pos)
			if oi := prev + v>>rankBits; oi >= ai {
				break
			} else {
				prev, pos = oi, next
			}
		}
		if pos == len(b) {
			rises = true // a new register after the last
			break
		}
		v, _ := sparseNext(b, pos)
		if prev+v>>rankBits != ai || uint8(e&rankMask) > uint8(v&rankMask) {
			rises = true // a new register, or a higher rank
			break
		}
	}
	if !rises {
		return false
	}
	out := make([]byte, 0, len(b)+4*len(add))
	n := uint32(0)
	last := uint32(0) // the index of the last entry written
	prev, pos = 0, 0
	k := 0
	for pos < len(b) || k < len(add) {
		var oi uint32
		var or uint8
		var next int
		hasOld := pos < len(b)
		if hasOld {
			var v uint32
			v, next = sparseNext(b, pos)
			oi, or = prev+v>>rankBits, uint8(v&rankMask)
		}
		i, r := oi, or
		switch {
		case k < len(add) && (!hasOld || add[k]>>rankBits < oi):
			i, r = add[k]>>rankBits, uint8(add[k]&rankMask) // a new register
			k++
		case k < len(add) && add[k]>>rankBits == oi:
			r = max(r, uint8(add[k]&rankMask))
			k++
			prev, pos = oi, next
		default:
			prev, pos = oi, next
		}
		out = appendEntry(out, i-last, r)
		last = i
		n++
	}
	h.regs, h.n, h.shared = out, n, false
	if h.sparseFull() {
		h.toDense()
	}
	return true
}
