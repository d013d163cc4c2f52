package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// On-disk layout in Pebble:
//
//	'c' + id  -> entry (format byte, kind, version, updated, expires, value or state)
//	'W' + shard -> the window deltas of one shard (deltarec.go), each read
//	             before the window's 'w' key
//	'w' + id  -> a window's delta over its 'c' entry (the same header, then
//	             counter.Window.AppendDelta); see applyWindowDelta
//	'i' + key -> idempotency record
//	'h', 's', 'u', 'R' -> rollups (see rollup.go)
const (
	prefixCounter     byte = 'c'
	prefixWindowDelta byte = 'w'
	prefixIdem        byte = 'i'
	entryFormat       byte = 1
)

// ErrCorrupt marks a stored value that cannot be decoded.
var ErrCorrupt = errors.New("engine: corrupt stored value")

// Pebble's write-side options. The engine serves every read from memory
// and reads Pebble back only at start, for rollup series and sketches and
// for idempotency records past IdempotencyMemory, so what Pebble costs is
// writing: each flush's batch, then compacting it level by level. With
// Pebble's defaults (4 MB memtables, L0 compacted at 4 files) a stream of
// new keys (the event pipeline's dedupe markers, one per event, keyed by
// event id so spread over the whole key space) was flushed every few
// hundred KB to MB and every L0 compaction rewrote the whole base level
// under it: compaction was 40% of the consumer's CPU. Bigger memtables
// flush far less often (9 flushes instead of about 200 for 3,000,000
// events), and twice as many L0 files before a compaction halve the
// rewrites of the base level (docs/bench/history.md, "Pebble memtables and
// L0 for the dedupe markers").
// Memtables start at 256 KB and double only when filled, so an idle or
// lightly written engine allocates no more than before; under a sustained
// write load up to memTableStop memtables are held (64 MB with these).
const (
	memTableSize          = 32 << 20 // the default and largest Config.MemTableSize
	memTableStop          = 2        // Pebble's default
	l0CompactionThreshold = 8
	l0StopWritesThreshold = 32
)

// DefaultMemTableSize is Config.MemTableSize's default and largest value.
const DefaultMemTableSize = memTableSize

// MinMemTableSize is the smallest Config.MemTableSize: below it a stream of
// new keys flushes and compacts almost continuously.
const MinMemTableSize = 4 << 20

// pebbleOptions returns the options the engine opens Pebble with; g, when
// not nil, is told of storage errors (disk.go).
func pebbleOptions(cfg Config, g *diskGuard) *pebble.Options {
	lg := pebbleLogger{l: cfg.Logger, g: g}
	mt := uint64(memTableSize)
	if cfg.MemTableSize > 0 {
		mt = cfg.MemTableSize
	}
	return &pebble.Options{
		Logger:                      lg,
		MemTableSize:                mt,
		MemTableStopWritesThreshold: memTableStop,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		EventListener:               &pebble.EventListener{BackgroundError: lg.backgroundError},
	}
}

// pebbleDir returns the filesystem and directory Pebble opens.
func pebbleDir(cfg Config) (vfs.FS, string) {
	switch {
	case cfg.FS != nil:
		return cfg.FS, cfg.Dir
	case cfg.InMemory:
		return vfs.NewMem(), ""
	}
	return vfs.Default, cfg.Dir
}

func openPebble(cfg Config, g *diskGuard) (*pebble.DB, error) {
	opts := pebbleOptions(cfg, g)
	fs, dir := pebbleDir(cfg)
	opts.FS = g.wrapFS(fs)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", cfg.Dir, err)
	}
	return db, nil
}

// stored is what the durable form of an entry holds, decoded.
type stored struct {
	kind    contract.Kind
	version uint64
	updated int64
	value   int64
	ext     *ext
}

// storedOf returns en's fields. Caller holds en's lock.
func storedOf(en *entry) stored {
	return stored{kind: en.kind(), version: en.version(), updated: en.updated, value: en.value, ext: en.ext()}
}

// encodeEntry appends en's durable form to buf. Caller holds en's lock.
func encodeEntry(buf []byte, en *entry) ([]byte, error) {
	s := storedOf(en)
	return encodeStored(buf, &s)
}

func encodeStored(buf []byte, en *stored) ([]byte, error) {
	return appendData(appendStoredHeader(buf, en), en)
}

// appendHeader appends the header of en's durable form (all but the
// value or state). Caller holds en's lock.
func appendHeader(buf []byte, en *entry) []byte {
	s := storedOf(en)
	return appendStoredHeader(buf, &s)
}

func appendStoredHeader(buf []byte, en *stored) []byte {
	buf = append(buf, entryFormat, byte(en.kind))
	buf = binary.AppendUvarint(buf, en.version)
	buf = binary.AppendVarint(buf, en.updated)
	var exp int64
	if en.ext != nil {
		exp = en.ext.expires
	}
	return binary.AppendVarint(buf, exp)
}

// appendData appends the encoding of en's value or state (the Data of a
// State): a zigzag varint for a counter, the state's MarshalBinary for the
// other kinds.
func appendData(buf []byte, en *stored) ([]byte, error) {
	if en.kind == contract.KindCounter {
		return binary.AppendVarint(buf, en.value), nil
	}
	if en.ext == nil || en.ext.state == nil {
		return nil, fmt.Errorf("engine: %s counter without state", en.kind)
	}
	if a, ok := en.ext.state.(interface {
		AppendBinary([]byte) ([]byte, error)
	}); ok {
		return a.AppendBinary(buf) // into the flush's buffer (windows)
	}
	m, ok := en.ext.state.(interface{ MarshalBinary() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("engine: state %T cannot be encoded", en.ext.state)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(buf, b...), nil
}

// decodeHeader decodes what appendStoredHeader wrote and returns the rest
// of b.
func decodeHeader(b []byte) (k contract.Kind, ver uint64, upd, exp int64, rest []byte, err error) {
	if len(b) < 2 || b[0] != entryFormat {
		return 0, 0, 0, 0, nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	k = contract.Kind(b[1])
	b = b[2:]
	ver, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, 0, 0, nil, fmt.Errorf("%w: version", ErrCorrupt)
	}
	b = b[n:]
	upd, n = binary.Varint(b)
	if n <= 0 {
		return 0, 0, 0, 0, nil, fmt.Errorf("%w: updated", ErrCorrupt)
	}
	b = b[n:]
	exp, n = binary.Varint(b)
	if n <= 0 {
		return 0, 0, 0, 0, nil, fmt.Errorf("%w: expires", ErrCorrupt)
	}
	return k, ver, upd, exp, b[n:], nil
}

// decodeEntry fills en (kind, version, updated, value, ext) from b.
func decodeEntry(b []byte, en *stored) error {
	k, ver, upd, exp, b, err := decodeHeader(b)
	if err != nil {
		return err
	}
	v, st, err := decodeData(k, b)
	if err != nil {
		return err
	}
	en.kind, en.version, en.updated, en.value, en.ext = k, ver, upd, v, nil
	if st != nil || exp != 0 {
		en.ext = &ext{expires: exp, state: st}
	}
	return nil
}

// decodeData decodes what appendData wrote for kind k: the entry's value
// (the counter's, or the cached value of a sharded or pn state) and its
// state (nil for a counter).
func decodeData(k contract.Kind, b []byte) (int64, any, error) {
	switch k {
	case contract.KindCounter:
		v, n := binary.Varint(b)
		if n <= 0 || n != len(b) {
			return 0, nil, fmt.Errorf("%w: value", ErrCorrupt)
		}
		return v, nil, nil
	case contract.KindSharded:
		s := counter.NewSharded(1)
		if err := s.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return s.Value(), s, nil
	case contract.KindPN:
		p := counter.NewPN()
		if err := p.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return p.Value(), p, nil
	case contract.KindHLL:
		h, _ := counter.NewHLL(14)
		if err := h.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return 0, h, nil
	case contract.KindWindow:
		w := &counter.Window{}
		if err := w.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return 0, w, nil
	case contract.KindHash:
		h := counter.NewHash()
		if err := h.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return 0, h, nil
	case contract.KindFloat:
		f := &counter.Float{}
		if err := f.UnmarshalBinary(b); err != nil {
			return 0, nil, err
		}
		return 0, f, nil
	}
	return 0, nil, fmt.Errorf("%w: kind %d", ErrCorrupt, k)
}

// load reads every counter into memory. Counters that expired while the
// node was down are dropped on first access or by the janitor.
func (e *Engine) load() error {
	if err := e.loadRollupSpecs(); err != nil {
		return err
	}
	if err := e.loadMarks(); err != nil {
		return err
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixCounter}, UpperBound: []byte{prefixCounter + 1}})
	if err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	defer it.Close()
	// The windows' deltas, in the same id order.
	wit, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixWindowDelta}, UpperBound: []byte{prefixWindowDelta + 1}})
	if err != nil {
		return fmt.Errorf("engine: load: %w", err)
	}
	defer wit.Close()
	wit.First()
	recs, err := e.loadDeltaRecs()
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		id := string(it.Key()[1:])
		h := hashID(id)
		no := shardOf(h)
		sh := &e.shards[no]
		var d stored
		if err := decodeEntry(it.Value(), &d); err != nil {
			if errors.Is(err, counter.ErrTooManyBuckets) {
				// Stored before the bound (docs/security.md, "Limits"): not
				// loaded, so not allocated; the id reads as missing and a
				// write to it replaces the stored value.
				e.cfg.Logger.Warn("engine: load: window counter above the bucket bound left unloaded", "id", id, "err", err)
				continue
			}
			return fmt.Errorf("engine: load %q: %w", id, err)
		}
		var m *recMember // the window's delta in its shard's record
		hasW := false    // the window has a 'w' key (read unless m is set)
		if d.kind == contract.KindWindow {
			if k, ok := recs[id]; ok {
				m = &e.fl.wrec[no].mem[k]
				if err := applyWindowDelta(&d, e.fl.wrec[no].valOf(m)); err != nil {
					return fmt.Errorf("engine: load %q: %w", id, err)
				}
			}
			for wit.Valid() && bytes.Compare(wit.Key()[1:], it.Key()[1:]) < 0 {
				e.fl.orphanWKey(wit.Key()[1:])
				wit.Next()
			}
			if wit.Valid() && bytes.Equal(wit.Key()[1:], it.Key()[1:]) {
				hasW = true
				if m == nil {
					if err := applyWindowDelta(&d, wit.Value()); err != nil {
						return fmt.Errorf("engine: load %q: %w", id, err)
					}
				}
				wit.Next()
			}
		}
		i, en, _, ok := sh.insertLocked(id, h)
		if !ok {
			return fmt.Errorf("engine: load: shard %d full", no)
		}
		en.setKind(d.kind)
		en.setVersion(d.version)
		en.updated, en.value = d.updated, d.value
		en.setExt(d.ext)
		if en.kind() == contract.KindSharded {
			s := en.ext().state.(*counter.Sharded)
			// Old data's shards (and a renamed node's) become this node's.
			_ = s.SetReplica(e.cfg.NodeID)
			en.value = s.Value()
		}
		if m != nil {
			m.idx, m.idRef, m.live = i, sh.refOf(i), true
		}
		if hasW {
			e.fl.setWKey(no, i)
		}
		e.keys.Add(1)
		if en.ext() != nil && en.ext().expires != 0 {
			e.expires.Add(1)
			sh.exp.push(en.ext().expires, i)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	for ; wit.Valid(); wit.Next() {
		e.fl.orphanWKey(wit.Key()[1:])
	}
	if err := wit.Error(); err != nil {
		return err
	}
	return e.loadRollupHeads()
}

// loadDeltaRecs reads the shards' window delta records (deltarec.go) into
// the flusher's and returns where each window's delta is in its shard's.
func (e *Engine) loadDeltaRecs() (map[string]int, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixDeltaRec}, UpperBound: []byte{prefixDeltaRec + 1}})
	if err != nil {
		return nil, fmt.Errorf("engine: load: %w", err)
	}
	defer it.Close()
	recs := map[string]int{}
	for it.First(); it.Valid(); it.Next() {
		if len(it.Key()) != 2 {
			return nil, fmt.Errorf("engine: load: %w: window delta record key %q", ErrCorrupt, it.Key())
		}
		no := int(it.Key()[1])
		r := &e.fl.wrec[no]
		if err := r.parse(it.Value()); err != nil {
			return nil, fmt.Errorf("engine: load: shard %d: %w", no, err)
		}
		for k := range r.mem {
			id := string(r.idOf(&r.mem[k]))
			if shardOf(hashID(id)) != no {
				return nil, fmt.Errorf("engine: load: %w: window delta of %q in the record of shard %d", ErrCorrupt, id, no)
			}
			if _, dup := recs[id]; dup {
				return nil, fmt.Errorf("engine: load: %w: two window deltas of %q", ErrCorrupt, id)
			}
			recs[id] = k
		}
	}
	return recs, it.Error()
}

// applyWindowDelta applies a window's delta record v (written by the flush
// while the window's 'c' entry is its base: every flush that writes the
// whole window deletes the delta in the same batch) to d, the window
// decoded from that entry: d takes the delta's header and its window the
// buckets written since the base. Only a window entry's delta is read:
// one left behind by a window that became another kind between two
// flushes belongs to no window entry, since a flush that writes a window
// whole deletes its delta.
func applyWindowDelta(d *stored, v []byte) error {
	k, ver, upd, exp, rest, err := decodeHeader(v)
	if err != nil {
		return fmt.Errorf("window delta: %w", err)
	}
	if k != contract.KindWindow {
		return fmt.Errorf("%w: window delta of kind %d", ErrCorrupt, k)
	}
	if err := d.ext.state.(*counter.Window).ApplyDelta(rest); err != nil {
		return fmt.Errorf("window delta: %w", err)
	}
	d.version, d.updated, d.ext.expires = ver, upd, exp
	return nil
}

// pebbleLogger sends Pebble's log lines to slog.
type pebbleLogger struct {
	l *slog.Logger
	g *diskGuard // nil: every Fatalf panics
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf panics, except for a storage error (a write or sync that failed:
// disk.go): then the fault is recorded, the node turns read-only, and
// Pebble goes on (its Apply returns nil after Fatalf; the engine checks
// for the fault after every commit and commits nothing more).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	if p.g != nil {
		for _, a := range args {
			if err, ok := a.(error); ok && isStorageError(err) {
				p.g.fault("pebble", "commit", err)
				return
			}
		}
	}
	panic("pebble: " + msg)
}

// backgroundError logs a failed flush or compaction, which Pebble retries;
// a full disk turns the node read-only (logged once, by the guard).
func (p pebbleLogger) backgroundError(err error) {
	if p.g != nil && isNoSpace(err) {
		p.g.noSpaceSeen("background", err)
		return
	}
	p.l.Error("pebble background error", "component", "pebble", "err", err)
}
