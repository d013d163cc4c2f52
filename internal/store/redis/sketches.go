package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Per-unit unique-count sketches (tiered mode's Uniques): one string per
// counter, precision, unit, level and index,
//
//	counter:{id}:u:<p>:<unit><level>:<index>
//
// holding the 2^p registers of a HyperLogLog (one byte each, register i at
// offset i) followed by one flag byte: 1 when the key holds everything the
// durable tier has for it (it was filled from there), 0 when it only holds
// what was added since the key was created (after a miss). The hash tag
// keeps every key of one counter in one cluster slot, and FlushCounters
// removes them with the counter keys.

// SketchKey names the sketch of id at precision p, unit ('h' or 'd'),
// level (0: one unit, k: the aligned block of 2^k units) and index.
func SketchKey(id string, p uint8, unit byte, level int, idx int64) string {
	return ValueKey(id) + ":u:" + strconv.Itoa(int(p)) + ":" + string(unit) + strconv.Itoa(level) + ":" + strconv.FormatInt(idx, 10)
}

// sketchAddScript raises registers in every key of KEYS. ARGV: m (the
// register count), ttl ms, then pairs of register index and rank. A missing
// key is created with m zero registers and flag 0.
var sketchAddScript = newScript(`
local m = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 0 then redis.call('SETRANGE', key, m, '\0') end
  for k = 3, #ARGV, 2 do
    local i = tonumber(ARGV[k])
    local r = tonumber(ARGV[k + 1])
    local cur = string.byte(redis.call('GETRANGE', key, i, i)) or 0
    if r > cur then redis.call('SETRANGE', key, i, string.char(r)) end
  end
  redis.call('PEXPIRE', key, ttl)
end
return 1
`)

// sketchFillScript merges ARGV[1] (m registers) into KEYS[1] register by
// register, sets its flag to 1, sets its ttl to ARGV[2] ms and returns the
// merged value.
var sketchFillScript = newScript(`
local regs = ARGV[1]
local m = #regs
local cur = redis.call('GET', KEYS[1])
local out = regs
if cur and #cur == m + 1 then
  local parts = {}
  for i = 1, m do
    local a, b = string.byte(cur, i), string.byte(regs, i)
    if a > b then parts[i] = string.char(a) else parts[i] = string.char(b) end
  end
  out = table.concat(parts)
end
out = out .. '\1'
redis.call('SET', KEYS[1], out, 'PX', tonumber(ARGV[2]))
return out
`)

// SketchAdd raises, in each of keys (one counter's sketch keys, made by
// SketchKey with the same precision), register regs[j]>>8 to rank
// regs[j]&0xff when higher, creating missing keys with m registers, and
// sets each key's ttl. It is one script: atomic.
func (s *Store) SketchAdd(ctx context.Context, keys []string, m int, regs []uint32, ttl time.Duration) error {
	if len(keys) == 0 || len(regs) == 0 {
		return nil
	}
	args := make([]any, 0, 2+2*len(regs))
	args = append(args, m, max(ttl.Milliseconds(), 1))
	for _, r := range regs {
		args = append(args, r>>8, r&0xff)
	}
	start := time.Now()
	ctx = context.WithoutCancel(ctx) // see write
	err := s.do(ctx, "sketch_add", true, func(ctx context.Context) error {
		return s.eval(ctx, sketchAddScript, keys, args...).Err()
	})
	s.observe("sketch_add", start, err)
	return err
}

// SketchGet returns the values of keys ("" for a missing key) in one
// round trip.
func (s *Store) SketchGet(ctx context.Context, keys []string) ([]string, error) {
	out := make([]string, len(keys))
	start := time.Now()
	err := s.do(ctx, "sketch_get", false, func(ctx context.Context) error {
		vs, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for i, v := range vs {
			out[i], _ = v.(string)
		}
		return nil
	})
	s.observe("sketch_get", start, err)
	return out, err
}

// SketchFill merges regs (all m registers) into key, marks it filled and
// returns its new value (registers and flag).
func (s *Store) SketchFill(ctx context.Context, key string, regs []byte, ttl time.Duration) (string, error) {
	if len(regs) == 0 {
		return "", errors.New("redis: empty sketch")
	}
	var out string
	start := time.Now()
	err := s.do(ctx, "sketch_fill", true, func(ctx context.Context) error {
		var err error
		out, err = s.eval(ctx, sketchFillScript, []string{key}, regs, max(ttl.Milliseconds(), 1)).Text()
		return err
	})
	s.observe("sketch_fill", start, err)
	return out, err
}

// SketchDelete removes keys (one counter's sketch keys).
func (s *Store) SketchDelete(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	start := time.Now()
	err := s.do(ctx, "sketch_delete", true, func(ctx context.Context) error {
		return s.rdb.Unlink(ctx, keys...).Err()
	})
	s.observe("sketch_delete", start, err)
	return err
}
