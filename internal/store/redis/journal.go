package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/counterd/counterd/internal/counter"
)

// The coalesced write-behind journal (the tiered mode's, see tiered's
// journal.go): a write script that ran also adds its write-behind delta,
// in the same script, to a field of a journal hash in the counter's slot.
// The field is Head + kind + "|" + shard + "|L" + life + "|" + Tail [+ hash
// field name]: the caller's Head names its write-behind generation and
// the delta's minute, Tail the counter; the kind, shard and life are the
// script's (an add of kind auto, a sharded add's random shard, the
// counter's life the write is in: docs/redis-tier.md, "Deletes and
// lives"). Every write of one generation to one life of a counter (kind,
// shard, minute, field) sums into one field (HINCRBY), so the journal
// costs one hash field per counter and generation, not one entry per
// write, and the lives of a counter deleted and created again within a
// generation stay apart (a replay applies each with its life; the trim of
// a deleted life's field leaves the next life's).

// Journal says where a write journals its delta.
type Journal struct {
	Key        string // the journal hash, in the counter's slot
	Head, Tail string
}

// Field is the journal field of a delta of the given kind, shard and
// life (field: a hash counter's field name, "" otherwise).
func (j *Journal) Field(kind string, shard int, life uint64, field string) string {
	return fmt.Sprintf("%s%s|%d|L%d|%s%s", j.Head, kind, shard, life, j.Tail, field)
}

// luaNeg is a Lua function negating an integer's text (nil for the
// smallest int64, which has no negation).
const luaNeg = `
local function jneg(s)
  s = tostring(s)
  if s == '-9223372036854775808' then return nil end
  if string.sub(s, 1, 1) == '-' then return string.sub(s, 2) end
  if s == '0' then return '0' end
  return '-' .. s
end
`

// journaledScript wraps a write script src (KEYS[1], KEYS[2], its own
// ARGV; it returns {'OK', ...} when it wrote): KEYS[3] is the journal,
// the last two ARGV its Head and Tail, hidden from src when hide is set
// (a src that reads #ARGV; copying costs). When src wrote,
// act (Lua using J, JH, JT, A: src's ARGV, r: its reply, and lifeof():
// the life the write is in, withLife's; it returns true when it
// journaled the write) runs, and a journaled reply starts
// with 'OKJ' instead of 'OK'. act adds with jincr, which never fails the
// script: a journal field that would overflow int64 is left as it was
// and the write is reported not journaled.
func journaledScript(src string, hide bool, act string) *script {
	args := `local A = ARGV
`
	if hide {
		args = `local A = {}
for i = 1, #ARGV - 2 do A[i] = ARGV[i] end
local ARGV = A
`
	}
	return writeScript(luaNeg + `
local J, JH, JT = KEYS[3], ARGV[#ARGV - 1], ARGV[#ARGV]
` + args + `-- jincr adds the deltas {{field, delta}, ...} to the journal, all or none.
local function jincr(ds)
  for i, d in ipairs(ds) do
    local r = redis.pcall('HINCRBY', J, d[1], d[2])
    if type(r) == 'table' and r.err then
      for k = i - 1, 1, -1 do
        local n = jneg(ds[k][2])
        if n then redis.call('HINCRBY', J, ds[k][1], n) end
      end
      return false
    end
  end
  return true
end
local function body()
` + src + `
end
local r = body()
if type(r) == 'table' and r[1] == 'OK' then
  local function act()
` + act + `
  end
  if act() then r[1] = 'OKJ' end
end
return r
`)
}

var (
	// A counter (not a float turned counter: its value is absolute).
	journaledAddScript = journaledScript(addScript.body, false, `
if r[2] == 'counter' and r[6] == 'float' then return false end
return jincr({{JH .. r[2] .. '|' .. tostring(r[4]) .. '|L' .. lifeof() .. '|' .. JT, A[2]}})`)
	journaledHAddScript = journaledScript(haddScript.body, true, `
local ds, f = {}, JH .. 'hash|-1|L' .. lifeof() .. '|' .. JT
for i = 4, #A, 2 do ds[#ds + 1] = {f .. A[i], A[i + 1]} end
return jincr(ds)`)
	// A set adds value - previous (not over a float: absolute then).
	journaledSetScript = journaledScript(setScript.body, false, `
if r[4] == 'float' then return false end
local n = jneg(r[3])
if not n then return false end
local f = JH .. 'counter|-1|L' .. lifeof() .. '|' .. JT
return jincr({{f, A[1]}, {f, n}})`)
	// journalMoveScript moves deltas between journal fields: KEYS[1] the
	// journal, ARGV from, to, delta, ... (all or none). Reply 1, or 0
	// when a field would overflow.
	journalMoveScript = newScript(luaNeg + `
local ds = {}
for i = 1, #ARGV, 3 do
  local n = jneg(ARGV[i + 2])
  if not n then return 0 end
  ds[#ds + 1] = {ARGV[i], n}
  ds[#ds + 1] = {ARGV[i + 1], ARGV[i + 2]}
end
for i, d in ipairs(ds) do
  local r = redis.pcall('HINCRBY', KEYS[1], d[1], d[2])
  if type(r) == 'table' and r.err then
    for k = i - 1, 1, -1 do redis.call('HINCRBY', KEYS[1], ds[k][1], jneg(ds[k][2])) end
    return 0
  end
end
return 1
`)
)

func init() {
	allScripts = append(allScripts, journaledAddScript, journaledHAddScript, journaledSetScript, journalMoveScript)
}

// journaledKeys are a journaled script's keys.
func journaledKeys(id string, j *Journal) []string {
	return []string{ValueKey(id), MetaKey(id), j.Key}
}

// journaled reports whether a journaled script's reply r says it
// journaled its write, and makes r's head 'OK' again.
func journaled(r []any) bool {
	if len(r) > 0 && str(r[0]) == "OKJ" {
		r[0] = "OK"
		return true
	}
	return false
}

// AddJournaled is AddResult that also adds the delta to the journal j in
// the same script (j.Field(reply's kind, reply's shard, life, "")); journaled
// is false when it did not (a float turned counter, a journal field at
// the int64 edge).
func (s *Store) AddJournaled(ctx context.Context, id string, kind Kind, delta int64, o AddOptions, j *Journal) (r AddReply, journaled bool, err error) {
	if j == nil {
		return AddReply{}, false, fmt.Errorf("%w: no journal", ErrInvalidArgument)
	}
	r, err = s.addResultJ(ctx, id, kind, delta, o, nil, nil, j, &journaled)
	return r, journaled, err
}

// HAddJournaled is HAddMax that also adds every field's delta to the
// journal j (j.Field("hash", -1, life, name)) in the same script.
func (s *Store) HAddJournaled(ctx context.Context, id string, deltas []counter.FieldDelta, maxFields int64, j *Journal) ([]counter.Field, uint64, bool, error) {
	if j == nil {
		return nil, 0, false, fmt.Errorf("%w: no journal", ErrInvalidArgument)
	}
	var jd bool
	fs, ver, err := s.haddJ(ctx, id, deltas, maxFields, nil, nil, j, &jd)
	return fs, ver, jd, err
}

// SetPrevKindJournaled is SetPrevKind that also adds value - prev to the
// journal j (j.Field("counter", -1, life, "")) in the same script, unless it
// replaced a float.
func (s *Store) SetPrevKindJournaled(ctx context.Context, id string, value int64, expected *uint64, ttl time.Duration, j *Journal) (ver uint64, prev int64, fromFloat, jd bool, err error) {
	if err := checkID(id); err != nil {
		return 0, 0, false, false, err
	}
	check, exp := "0", uint64(0)
	if expected != nil {
		check, exp = "1", *expected
	}
	err = s.write(ctx, "set", id, func(ctx context.Context, mayCreate string) ([]any, error) {
		return s.runJournaled(ctx, journaledSetScript, id, j, value, check, exp, ttl.Milliseconds(), s.nowMS(), mayCreate)
	}, func(r []any) error {
		jd = journaled(r)
		v, err1 := toInt(r[1])
		p, err2 := toInt(r[2])
		ver, prev, fromFloat = uint64(v), p, len(r) > 3 && str(r[3]) == "float"
		return errors.Join(err1, err2)
	})
	return ver, prev, fromFloat, jd, err
}

// runJournaled runs the journaled script sc for id.
func (s *Store) runJournaled(ctx context.Context, sc *script, id string, j *Journal, args ...any) ([]any, error) {
	v, err := s.eval(ctx, sc, journaledKeys(id, j), append(args, j.Head, j.Tail)...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, errEmptyReply
	}
	return v, nil
}

// JournalMove is one delta to move from one journal field to another.
type JournalMove struct {
	From, To string
	Delta    int64
}

// MoveJournal moves deltas between fields of the journal key (all or
// none, in one script): a write whose generation was cut before its
// delta reached the write-behind is journaled again under the current
// one. ok is false when a field would overflow int64 (nothing moved).
func (s *Store) MoveJournal(ctx context.Context, key string, ms []JournalMove) (ok bool, err error) {
	args := make([]any, 0, 3*len(ms))
	for _, m := range ms {
		args = append(args, m.From, m.To, m.Delta)
	}
	err = s.do(ctx, "journal-move", true, func(ctx context.Context) error {
		n, err := s.eval(ctx, journalMoveScript, []string{key}, args...).Int()
		ok = n == 1
		return err
	})
	return ok, err
}
