package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// Dedupe marks beside a counter (the pipeline's contract.CounterMarker on
// the tiered store): a write guarded by marks runs in one script with
// them. If one of the mark keys exists, nothing is written and the reply
// lists them; else, if the slot's marker asks for it (Redis may have lost
// marks: see tiered's idem.go), nothing is written and the caller asks
// the durable tier first; else the write runs and, if it succeeds, every
// mark key is set with the marks' TTL. The mark keys and the slot marker
// must be in the counter's slot (hash tag), so the script runs on Redis
// Cluster.

// Marks guard one write.
type Marks struct {
	Keys []string // one key per mark, in the counter's slot
	// Slot is the slot marker's key (in the counter's slot), read when
	// Now is not 0: a missing marker, or one whose time (its first
	// number, unix ns) is after Now, makes the write wait for the caller
	// to check its durable tier (MarkedReply.Check).
	Slot string
	Now  int64
	TTL  time.Duration // of the mark keys
	// Journal, when not "", is a hash in the counter's slot where a write
	// that ran records its write-behind work (the tiered mode's journal):
	// field WriteID, value Entry + "\n" + the write's reply (its items
	// after 'OK', as text, space-separated) + "\n" + the counter's life
	// the write is in, in the same script.
	Journal, WriteID, Entry string
}

// MarkedReply is what a marked write did when it did not write.
type MarkedReply struct {
	Seen   []int  // indexes in Marks.Keys of the marks that exist
	Check  bool   // the slot marker asks for the durable tier
	Marker string // the slot marker's value when Check ("": none)
}

// Written reports whether the write ran.
func (r MarkedReply) Written() bool { return len(r.Seen) == 0 && !r.Check }

// markedScript wraps a write script src (KEYS[1], KEYS[2] as every
// script's; it returns {'OK', ...} when it wrote): KEYS[3] is the slot
// marker, KEYS[4...] the mark keys; the last two ARGV are the time to
// compare the marker with (” : do not), the marks' TTL in ms, the
// journal's write id (” : none; KEYS[4] is then unused) and entry,
// hidden from src, which sees its own ARGV; KEYS[4] is the journal, the
// mark keys KEYS[5...].
func markedScript(src string) *script {
	return writeScript(`
local MN, MT, JW, JE = ARGV[#ARGV - 3], ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local A = {}
for i = 1, #ARGV - 4 do A[i] = ARGV[i] end
local ARGV = A
local seen = {'SEEN'}
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then seen[#seen + 1] = i - 5 end
end
if #seen > 1 then return seen end
if MN ~= '' then
  local m = redis.call('GET', KEYS[3])
  if not m then return {'CHECK', ''} end
  local u = tonumber(string.match(m, '^[^:]*'))
  if not u or u > tonumber(MN) then return {'CHECK', m} end
end
local function body()
` + src + `
end
local r = body()
if type(r) == 'table' and r[1] == 'OK' then
  for i = 5, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', MT) end
  if JW ~= '' then
    local p = {}
    for i = 2, #r do p[#p + 1] = tostring(r[i]) end
    redis.call('HSET', KEYS[4], JW, JE .. '\n' .. table.concat(p, ' ') .. '\n' .. lifeof())
  end
end
return r
`)
}

var (
	markedAddScript  = markedScript(addScript.body)
	markedHAddScript = markedScript(haddScript.body)
)

// runMarked runs sc (a markedScript) for id under m.
func (s *Store) runMarked(ctx context.Context, sc *script, id string, m *Marks, args ...any) ([]any, error) {
	keys := append(keys(id), m.Slot)
	if m.WriteID != "" {
		keys = append(keys, m.Journal)
	} else {
		keys = append(keys, m.Slot) // unused
	}
	keys = append(keys, m.Keys...)
	now := ""
	if m.Now != 0 {
		now = strconv.FormatInt(m.Now, 10)
	}
	args = append(args, now, max(m.TTL.Milliseconds(), 1), m.WriteID, m.Entry)
	v, err := s.eval(ctx, sc, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, errEmptyReply
	}
	return v, nil
}

// markedReply reads a marked script's reply that did not write: ok is
// false when it wrote (the reply is the write's).
func markedReply(r []any) (mr MarkedReply, ok bool, err error) {
	switch str(r[0]) {
	case "SEEN":
		for _, x := range r[1:] {
			n, e := toInt(x)
			if e != nil {
				return mr, true, e
			}
			mr.Seen = append(mr.Seen, int(n))
		}
		return mr, true, nil
	case "CHECK":
		mr.Check = true
		if len(r) > 1 {
			mr.Marker = str(r[1])
		}
		return mr, true, nil
	}
	return mr, false, nil
}

// AddMarked is AddResult guarded by m: the add runs (reply's Written)
// only when none of m's marks exists and the slot marker does not ask
// for the durable tier, and then sets the marks, in the same script.
func (s *Store) AddMarked(ctx context.Context, id string, kind Kind, delta int64, o AddOptions, m *Marks) (AddReply, MarkedReply, error) {
	if m == nil {
		return AddReply{}, MarkedReply{}, fmt.Errorf("%w: no marks", ErrInvalidArgument)
	}
	var mr MarkedReply
	r, err := s.addResult(ctx, id, kind, delta, o, m, &mr)
	return r, mr, err
}

// HAddMarked is HAddMax guarded by m, as AddMarked.
func (s *Store) HAddMarked(ctx context.Context, id string, deltas []counter.FieldDelta, maxFields int64, m *Marks) ([]counter.Field, uint64, MarkedReply, error) {
	if m == nil {
		return nil, 0, MarkedReply{}, fmt.Errorf("%w: no marks", ErrInvalidArgument)
	}
	var mr MarkedReply
	fs, ver, err := s.hadd(ctx, id, deltas, maxFields, m, &mr)
	return fs, ver, mr, err
}
