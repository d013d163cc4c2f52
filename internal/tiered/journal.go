package tiered

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/store/postgres"
	redisstore "github.com/counterd/counterd/internal/store/redis"
)

// The write-behind journal: what closes the crash window of the marked
// pipeline writes (countermarks.go). The script that applies a marked op
// in Redis also records it, in the same script, in a journal of
// write-behind work: a hash in the counter's Redis Cluster slot
// (journalKey: one per slot, shared by the nodes), field the write's id
// (this process's instance id, "-", a sequence number), value the op
// (JSON: counter, delta or field deltas, time, marks, mark TTL) and the
// script's reply (kind, version, shard). The op goes to the write-behind
// as a postgres.JournalWrite: PostgreSQL applies its deltas in the
// transaction that records its id in journal_writes, and not at all when
// the id is there, so handing it over again never applies it twice. Once
// the batch holding it committed, its journal entry is deleted
// (trimJournal).
//
// A process SIGKILLed between the script and that commit leaves its
// entries in the journal. Each process holds a lease in Redis
// (leasePrefix+instance, renewed every JournalLease/3); every
// JournalRecoverInterval, and at start, a process reads every slot's
// journal and replays, in one PostgreSQL batch, the entries whose
// instance holds no lease (it stopped, or its Redis lease ran out), then
// deletes them. Replays by several processes at once, or of an entry
// whose owner did commit, apply once (journal_writes). Entries of live
// instances are left to them: a replay orders a write before the rest of
// its owner's batch, which is wrong only around a delete of the counter.
const (
	journalPrefix = "counterd:wbj:"
	leasePrefix   = "counterd:wbj-lease:"
	// instancesKey is the set of instances that may have journal entries
	// (added at start and with every lease renewal): a recovery round
	// reads every slot's journal only when one of them holds no lease,
	// and at start and every journalSweepRounds rounds in any case.
	instancesKey       = "counterd:wbj-instances"
	journalSweepRounds = 60
	// DefaultJournalLease and DefaultJournalRecoverInterval are the
	// Options' defaults.
	DefaultJournalLease           = 15 * time.Second
	DefaultJournalRecoverInterval = 10 * time.Second
	// journalScan is how many slots' journals one round trip sizes.
	journalScan = 1024
	// journalReplayBatch bounds the writes of one replay batch.
	journalReplayBatch = 2000
)

// journalKey is the journal of the Redis Cluster slot of the key k.
func journalKey(k string) string { return journalPrefix + "{" + slotTag(keySlot(k)) + "}" }

func newInstance(node string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	inst := hex.EncodeToString(rnd[:])
	if node != "" {
		// '-' separates the instance from the sequence in write ids.
		inst = strings.ReplaceAll(node, "-", "_") + "_" + inst
	}
	return inst
}

// journalEntry is a journaled op, as its journal entry holds it (before
// the script's reply).
type journalEntry struct {
	Op      string      `json:"o"` // "add" or "hadd"
	ID      string      `json:"id"`
	Delta   int64       `json:"d,omitempty"`
	Fields  []fieldPair `json:"f,omitempty"`
	At      int64       `json:"at"` // unix ns: the time series' minute
	Marks   []string    `json:"m"`
	TTL     int64       `json:"ttl"` // of the marks, ns
	Created int64       `json:"c"`   // unix ns
}

type fieldPair struct {
	Name  string `json:"n"`
	Delta int64  `json:"d"`
}

// journal prepares mw's journal entry for op (applyMarkedOp).
func (b *Backend) journal(mw *markedWrite, op *markedOpInfo) {
	e := journalEntry{Op: op.op, ID: op.id, Delta: op.delta, At: op.at.UnixNano(), Marks: op.marks,
		TTL: int64(mw.marks.TTL), Created: op.created.UnixNano()}
	for _, f := range op.fields {
		e.Fields = append(e.Fields, fieldPair{f.Name, f.Delta})
	}
	raw, _ := json.Marshal(e) // no value that fails
	mw.marks.Journal = journalKey(redisstore.ValueKey(op.id))
	mw.marks.WriteID = b.inst + "-" + strconv.FormatUint(b.wseq.Add(1), 10)
	mw.marks.Entry = string(raw)
}

type markedOpInfo struct {
	op, id  string
	delta   int64
	fields  []counter.FieldDelta
	at      time.Time
	created time.Time
	marks   []string
}

// journaled hands a marked write that its script journaled to the
// write-behind as one postgres.JournalWrite, and reports whether it did
// (else the caller hands the deltas over as usual).
func (b *Backend) journaled(mw *markedWrite, ds []postgres.Delta, id string, ver uint64) bool {
	if mw == nil || mw.marks.WriteID == "" {
		return false
	}
	w := postgres.JournalWrite{ID: mw.marks.WriteID, Ref: mw.marks.Journal, Deltas: ds}
	if ver > 0 {
		w.Versions = []postgres.Version{{ID: id, Version: ver}}
	}
	b.agg.AddJournal(w)
	return true
}

// trimJournal deletes the journal entries of the batch's journaled
// writes (the aggregator's OnCommit): they are in PostgreSQL. A delete
// that fails leaves entries replayed (as applied already) once this
// instance is gone.
func (b *Backend) trimJournal(batch postgres.Batch) {
	if len(batch.Journal) == 0 || b.noTrim.Load() {
		return
	}
	byKey := map[string][]string{}
	for _, w := range batch.Journal {
		if w.Gen != 0 {
			genFields(b.inst, w, byKey)
			continue
		}
		byKey[w.Ref] = append(byKey[w.Ref], w.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.trimEntries(ctx, byKey); err != nil {
		b.opts.Logger.Warn("tiered: trimming the write-behind journal", "err", err)
	}
}

func (b *Backend) trimEntries(ctx context.Context, byKey map[string][]string) error {
	p := b.rs.Client().Pipeline()
	for k, ids := range byKey {
		p.HDel(ctx, k, ids...)
	}
	_, err := p.Exec(ctx)
	return err
}

// journalLoop holds this instance's lease and replays the journals of
// instances without one, at start and every JournalRecoverInterval,
// until Close.
func (b *Backend) journalLoop() {
	defer close(b.journalDone)
	renew := time.NewTicker(b.opts.JournalLease / 3)
	defer renew.Stop()
	recover := time.NewTicker(b.opts.JournalRecoverInterval)
	defer recover.Stop()
	run := func(what string, fn func(context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := fn(ctx); err != nil {
			b.opts.Logger.Warn("tiered: write-behind journal: "+what, "err", err)
		}
	}
	round := 0
	recoverOnce := func(ctx context.Context) error {
		err := b.recoverDead(ctx, round%journalSweepRounds == 0)
		round++
		return err
	}
	run("recovery", recoverOnce)
	for {
		select {
		case <-b.stop:
			return
		case <-renew.C:
			run("lease", b.renewLease)
		case <-recover.C:
			run("recovery", recoverOnce)
		}
	}
}

// renewLease renews this instance's lease and (re)registers it in
// instancesKey, so a recovery that dropped it while it was paused finds
// it again.
func (b *Backend) renewLease(ctx context.Context) error {
	p := b.rs.Client().Pipeline()
	p.Set(ctx, leasePrefix+b.inst, "1", b.opts.JournalLease)
	p.SAdd(ctx, instancesKey, b.inst)
	_, err := p.Exec(ctx)
	return err
}

// recoverDead runs RecoverJournals when a registered instance holds no
// lease, or when sweep is set (entries of an instance that never
// registered: its registration failed), then forgets the instances it
// found dead: their entries are replayed.
func (b *Backend) recoverDead(ctx context.Context, sweep bool) error {
	insts, err := b.rs.Client().SMembers(ctx, instancesKey).Result()
	if err != nil {
		return unavailable(err)
	}
	p := b.rs.Client().Pipeline()
	leases := make([]interface{ Val() int64 }, len(insts))
	for i, inst := range insts {
		leases[i] = p.Exists(ctx, leasePrefix+inst)
	}
	if len(insts) > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return unavailable(err)
		}
	}
	var dead []any
	for i, inst := range insts {
		if inst != b.inst && leases[i].Val() == 0 {
			dead = append(dead, inst)
		}
	}
	if len(dead) == 0 && !sweep {
		return nil
	}
	if _, err := b.RecoverJournals(ctx); err != nil {
		return err
	}
	if len(dead) > 0 {
		return unavailable(b.rs.Client().SRem(ctx, instancesKey, dead...).Err())
	}
	return nil
}

// endLease drops this instance's lease at Close, after the last flush:
// what is left in the journal (a trim failed) is replayed elsewhere.
func (b *Backend) endLease(ctx context.Context) error {
	return b.rs.Client().Del(ctx, leasePrefix+b.inst).Err()
}

// RecoverJournals replays to PostgreSQL the journal entries of every
// instance that holds no lease (not this one's), then deletes them; it
// returns how many it replayed (some may have been applied already, and
// are not again).
func (b *Backend) RecoverJournals(ctx context.Context) (int, error) {
	alive := map[string]bool{b.inst: true}
	var ws []postgres.JournalWrite
	var bad []error
	replayed := 0
	flush := func() error {
		if len(ws) == 0 {
			return nil
		}
		byKey := map[string][]string{}
		for _, w := range ws {
			byKey[w.Ref] = append(byKey[w.Ref], w.ID)
		}
		if err := b.replay(ctx, ws, byKey); err != nil {
			return err
		}
		replayed += len(ws)
		ws = ws[:0]
		return nil
	}
	// The coalesced journal's fields, by generation (jgenID), and their
	// fields by journal key: a generation replays whole, in one batch.
	type genWrite struct {
		w     postgres.JournalWrite
		byKey map[string][]string
	}
	gens := map[string]*genWrite{}
	for first := 0; first < slots; first += journalScan {
		p := b.rs.Client().Pipeline()
		lens := make([]interface{ Val() int64 }, 0, journalScan)
		for s := first; s < min(first+journalScan, slots); s++ {
			lens = append(lens, p.HLen(ctx, journalPrefix+"{"+slotTag(s)+"}"))
		}
		if _, err := p.Exec(ctx); err != nil {
			return replayed, unavailable(err)
		}
		for i, n := range lens {
			if n.Val() == 0 {
				continue
			}
			key := journalPrefix + "{" + slotTag(first+i) + "}"
			entries, err := b.rs.Client().HGetAll(ctx, key).Result()
			if err != nil {
				return replayed, unavailable(err)
			}
			for wid, v := range entries {
				inst, _, ok := strings.Cut(wid, "-")
				if !ok {
					continue
				}
				live, known := alive[inst]
				if !known {
					n, err := b.rs.Client().Exists(ctx, leasePrefix+inst).Result()
					if err != nil {
						return replayed, unavailable(err)
					}
					live = n > 0
					alive[inst] = live
				}
				if live {
					continue
				}
				if rest := wid[len(inst)+1:]; strings.HasPrefix(rest, "g") {
					gen, d, err := parseGenField(rest, v)
					if err != nil {
						bad = append(bad, err)
						continue
					}
					id := jgenID(inst, gen)
					g := gens[id]
					if g == nil {
						g = &genWrite{w: postgres.JournalWrite{ID: id, Gen: gen}, byKey: map[string][]string{}}
						gens[id] = g
					}
					g.w.Deltas = append(g.w.Deltas, d)
					g.byKey[key] = append(g.byKey[key], wid)
					continue
				}
				w, err := parseJournal(wid, key, v)
				if err != nil {
					bad = append(bad, err)
					continue
				}
				ws = append(ws, w)
				if len(ws) >= journalReplayBatch {
					if err := flush(); err != nil {
						return replayed, err
					}
				}
			}
		}
	}
	if err := flush(); err != nil {
		return replayed, err
	}
	// Generations, several per batch up to journalReplayBatch deltas.
	var gws []postgres.JournalWrite
	byKey, n := map[string][]string{}, 0
	flushGens := func() error {
		if len(gws) == 0 {
			return nil
		}
		if err := b.replay(ctx, gws, byKey); err != nil {
			return err
		}
		replayed += len(gws)
		gws, byKey, n = nil, map[string][]string{}, 0
		return nil
	}
	for _, g := range gens {
		gws = append(gws, g.w)
		for k, fs := range g.byKey {
			byKey[k] = append(byKey[k], fs...)
			n += len(fs)
		}
		if n >= journalReplayBatch {
			if err := flushGens(); err != nil {
				return replayed, err
			}
		}
	}
	if err := flushGens(); err != nil {
		return replayed, err
	}
	return replayed, errors.Join(bad...)
}

// replay commits ws in one batch of its own, then deletes their
// entries (byKey: the fields by journal key).
func (b *Backend) replay(ctx context.Context, ws []postgres.JournalWrite, byKey map[string][]string) error {
	id := fmt.Sprintf("%s-replay-%d", b.inst, b.wseq.Add(1))
	if _, err := b.pg.Apply(ctx, postgres.Batch{ID: id, Journal: ws}); err != nil {
		return unavailable(err)
	}
	b.journalReplays.Add(uint64(len(ws)))
	return unavailable(b.trimEntries(ctx, byKey))
}

// parseJournal reads the journal entry v of write wid in journal key.
func parseJournal(wid, key, v string) (postgres.JournalWrite, error) {
	w := postgres.JournalWrite{ID: wid, Ref: key}
	head, reply, _ := strings.Cut(v, "\n")
	// The life the write was in, on a third line (none in an entry written
	// before lives were journaled: 0, applied whatever the row's life).
	reply, lives, _ := strings.Cut(reply, "\n")
	life, _ := strconv.ParseUint(strings.TrimSpace(lives), 10, 64)
	var e journalEntry
	if err := json.Unmarshal([]byte(head), &e); err != nil {
		return w, fmt.Errorf("tiered: journal entry %s: %w", wid, err)
	}
	r := strings.Fields(reply)
	at := time.Unix(0, e.At)
	var ver uint64
	switch e.Op {
	case "add":
		if len(r) < 3 {
			return w, fmt.Errorf("tiered: journal entry %s: reply %q", wid, reply)
		}
		ver = uintOf(r[1])
		shard, _ := strconv.Atoi(r[2])
		d := postgres.Delta{CounterID: e.ID, Kind: r[0], Shard: shard, Delta: e.Delta, At: at, Life: life}
		if len(r) > 4 && r[4] == "float" { // a float became a counter (fromFloat)
			v, err := strconv.ParseFloat(r[3], 64)
			if err != nil {
				return w, fmt.Errorf("tiered: journal entry %s: value %q", wid, r[3])
			}
			d = postgres.Delta{CounterID: e.ID, Kind: string(redisstore.KindCounter), Shard: -1, Delta: int64(v), At: at, Life: life}
		}
		w.Deltas = []postgres.Delta{d}
	case "hadd":
		if len(r) > 0 {
			ver = uintOf(r[0])
		}
		for _, f := range e.Fields {
			w.Deltas = append(w.Deltas, postgres.Delta{CounterID: e.ID, Kind: postgres.KindHash, Shard: -1, Field: f.Name, Delta: f.Delta, At: at, Life: life})
		}
	default:
		return w, fmt.Errorf("tiered: journal entry %s: op %q", wid, e.Op)
	}
	if ver > 0 {
		w.Versions = []postgres.Version{{ID: e.ID, Version: ver}}
	}
	created := time.Unix(0, e.Created)
	for _, m := range e.Marks {
		w.Idem = append(w.Idem, postgres.IdemRecord{Key: cmarkRecord(e.ID, m), Record: []byte{1}, Created: created, Expires: created.Add(time.Duration(e.TTL))})
	}
	return w, nil
}

// uintOf reads a number Lua wrote (an integer, or a float's text).
func uintOf(s string) uint64 {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n
	}
	f, _ := strconv.ParseFloat(s, 64)
	return uint64(max(f, 0))
}

// The coalesced journal: every other tiered write that changes a counter
// in PostgreSQL by a delta (plain adds, sets, hash adds, the same under
// an idempotency key) adds its delta, in the script that applies it, to
// a field of the counter's slot journal named by this instance, the
// write-behind generation (the aggregator's cycle) it goes into, the
// delta's minute, the counter and its life (redisstore.Journal): all
// writes of one generation to one life of a counter sum into one field,
// replayed with that life. The generation's deltas
// commit as one postgres.JournalWrite whose id is jgenID(inst, gen) (one
// journal_writes row per flush), after which its fields are deleted; a
// replay of a dead instance's fields applies each generation in one
// batch under the same id, so once in all.

// jgenID is the JournalWrite id of instance inst's generation gen.
func jgenID(inst string, gen uint64) string { return inst + "-g" + strconv.FormatUint(gen, 10) }

// jbegin starts a journaled write: it holds the write-behind's cycle
// (unless ctx is already in a hold: a keyed request's, a marked op's),
// so that the delta goes into the generation it is journaled under, and
// returns that generation, the ctx to write with (a read-through inside
// lets go of the hold, letGo) and the release.
func (b *Backend) jbegin(ctx context.Context) (context.Context, uint64, func()) {
	if _, ok := ctx.Value(holdKey{}).(*hold); ok {
		return ctx, b.agg.Gen(), func() {}
	}
	h := &hold{release: b.agg.Hold()}
	return context.WithValue(ctx, holdKey{}, h), b.agg.Gen(), h.letGo
}

// journalOf is where a write to id of generation gen at time at
// journals its delta.
func (b *Backend) journalOf(id string, gen uint64, at time.Time) *redisstore.Journal {
	minute := at.Unix() / 60
	h := b.jhead.Load()
	if h == nil || h.gen != gen || h.minute != minute {
		h = &jhead{gen: gen, minute: minute, head: jgenID(b.inst, gen) + "|" + strconv.FormatInt(minute, 10) + "|"}
		b.jhead.Store(h)
	}
	return &redisstore.Journal{Key: journalKey(redisstore.ValueKey(id)), Head: h.head, Tail: strconv.Itoa(len(id)) + ":" + id}
}

// jhead is the last journal head made (journalOf): most writes share it.
type jhead struct {
	gen    uint64
	minute int64
	head   string
}

// handJournaled hands ds, journaled under generation gen in j, to the
// write-behind. When gen was cut meanwhile (a hold let go, or held
// longer than the aggregator waits), the deltas are moved in the journal
// to the current generation first; if that fails they are handed over
// unjournaled (a crash before the next commit then loses them in
// PostgreSQL).
func (b *Backend) handJournaled(ctx context.Context, gen uint64, j *redisstore.Journal, ds []postgres.JournalDelta) {
	for {
		if b.agg.AddJournaled(gen, ds...) {
			return
		}
		release := b.agg.Hold()
		g2 := b.agg.Gen()
		nj := b.journalOf(ds[0].ID, g2, ds[0].At)
		ms := make([]redisstore.JournalMove, len(ds))
		for i, d := range ds {
			ms[i] = redisstore.JournalMove{From: j.Field(d.Kind, d.Shard, d.Life, d.Field), To: nj.Field(d.Kind, d.Shard, d.Life, d.Field), Delta: d.Delta}
		}
		ok, err := b.rs.MoveJournal(ctx, j.Key, ms)
		if err != nil || !ok {
			b.opts.Logger.Warn("tiered: write-behind journal: moving a write to the current generation", "id", ds[0].ID, "err", err)
			b.handPlain(ds)
			release()
			return
		}
		b.journalMoves.Add(1)
		gen, j = g2, nj
		ok = b.agg.AddJournaled(gen, ds...)
		release()
		if ok {
			return
		}
	}
}

// handPlain hands ds to the write-behind unjournaled.
func (b *Backend) handPlain(ds []postgres.JournalDelta) {
	for _, d := range ds {
		if d.Kind == postgres.KindHash {
			b.agg.AddFieldLife(d.ID, d.Field, d.Delta, d.At, d.Life)
			if d.Version > 0 {
				b.agg.SetVersion(d.ID, d.Version)
			}
			continue
		}
		b.agg.AddVersion(d.ID, d.Kind, d.Shard, d.Delta, d.At, d.Version, d.Life)
	}
}

// genFields are the journal fields of a generation's write w, by
// journal key.
func genFields(inst string, w postgres.JournalWrite, byKey map[string][]string) {
	for _, d := range slices.Concat(w.Deltas, w.Trim) {
		j := redisstore.Journal{
			Head: jgenID(inst, w.Gen) + "|" + strconv.FormatInt(d.At.Unix()/60, 10) + "|",
			Tail: strconv.Itoa(len(d.CounterID)) + ":" + d.CounterID,
		}
		k := journalKey(redisstore.ValueKey(d.CounterID))
		byKey[k] = append(byKey[k], j.Field(d.Kind, d.Shard, d.Life, d.Field))
	}
}

// parseGenField reads a coalesced journal field (after "<inst>-") and
// its value: the generation and the delta, of the life the field names
// (0 in a field written before lives were journaled: applied to the row
// whatever its life).
func parseGenField(rest, v string) (gen uint64, d postgres.Delta, err error) {
	bad := func() (uint64, postgres.Delta, error) {
		return 0, postgres.Delta{}, fmt.Errorf("tiered: journal field %q", rest)
	}
	rest, ok := strings.CutPrefix(rest, "g")
	parts := strings.SplitN(rest, "|", 5)
	if !ok || len(parts) != 5 {
		return bad()
	}
	gen, err1 := strconv.ParseUint(parts[0], 10, 64)
	minute, err2 := strconv.ParseInt(parts[1], 10, 64)
	shard, err3 := strconv.Atoi(parts[3])
	var life uint64
	var err6 error
	tail := parts[4]
	if l, ok := strings.CutPrefix(tail, "L"); ok { // the life (an id's length starts with a digit)
		var ls string
		if ls, tail, ok = strings.Cut(l, "|"); !ok {
			return bad()
		}
		life, err6 = strconv.ParseUint(ls, 10, 64)
	}
	n, tail, ok := strings.Cut(tail, ":")
	idLen, err4 := strconv.Atoi(n)
	delta, err5 := strconv.ParseInt(v, 10, 64)
	if errors.Join(err1, err2, err3, err4, err5, err6) != nil || !ok || idLen > len(tail) || idLen < 1 {
		return bad()
	}
	d = postgres.Delta{CounterID: tail[:idLen], Kind: parts[2], Shard: shard, Field: tail[idLen:], Delta: delta,
		At: time.Unix(minute*60, 0).UTC(), Life: life}
	return gen, d, nil
}
