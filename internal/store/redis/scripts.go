package redisstore

// Every script takes KEYS[1] = counter:{id} and KEYS[2] = counter:{id}:meta
// and derives the other keys of the counter (shards, window buckets) from
// KEYS[1]. They all carry the same hash tag, so in Redis Cluster they live
// in KEYS[1]'s slot.
//
// Replies are tables whose first element is 'OK' or 'MISS' (the counter has
// no meta and the caller did not allow creating it: load it first). Errors
// are error replies with a first word the store maps to a sentinel:
// WRONGKIND, OVERFLOW, VERSIONCONFLICT, INVALID.
//
// Values travel as strings: Redis converts Lua numbers to doubles, which
// would round int64 values above 2^53, so scripts GET values after
// INCRBY (a plain counter's add formats the reply when it is below 2^53
// in magnitude: exact) and Go does the sums.

// luaPrelude is shared by the scripts.
const luaPrelude = `
local base, meta = KEYS[1], KEYS[2]
local function fmt(n) return string.format('%.0f', n) end
-- a tombstone: the counter was deleted (its value holds the life deleted)
local function dead() return redis.call('EXISTS', base .. ':dead') == 1 end
local function kindcheck(want, maycreate)
  local mk = redis.call('HGET', meta, 'kind')
  if not mk then
    if maycreate ~= '1' then return nil, nil, true end
    return want, nil, false, true
  end
  if want ~= '' and want ~= mk then
    return nil, redis.error_reply('WRONGKIND counter is a ' .. mk .. ', not a ' .. want), false
  end
  return mk, nil, false
end
-- created: true/false when the caller knows whether the counter is new
local function bump(kind, now, extra, created)
  if created == nil then created = redis.call('HEXISTS', meta, 'kind') == 0 end
  if created then
    redis.call('HSET', meta, 'kind', kind)
    if extra then redis.call('HSET', meta, unpack(extra)) end
  end
  redis.call('HSET', meta, 'updated_at', now)
  return redis.call('HINCRBY', meta, 'version', 1)
end
local function incr(cmd, key, field, delta)
  local r
  if field then r = redis.pcall(cmd, key, field, delta) else r = redis.pcall(cmd, key, delta) end
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'overflow', 1, true) then return redis.error_reply('OVERFLOW ' .. r.err) end
    return redis.error_reply(r.err)
  end
  return nil, r
end
-- exact decimal of an integer reply, re-read when a double cannot hold it
local function exact(n, key)
  if n > -9007199254740992 and n < 9007199254740992 then return fmt(n) end
  return redis.call('GET', key)
end
-- remaining user TTL (ms) from the meta field exp (absolute ms); 0 = none
local function ttlof(now)
  local exp = redis.call('HGET', meta, 'exp')
  if not exp then return 0 end
  local t = tonumber(exp) - tonumber(now)
  if t < 1 then t = 1 end
  return fmt(t)
end
-- window bucket starts (ms) inside the window ending at now
-- FIELDLIMIT error when the fields named by ARGV[from], ARGV[from+2], ...
-- that base lacks would take it past max fields (max '0': none)
local function fieldlimit(max, from)
  local m = tonumber(max)
  if m == 0 then return nil end
  local n, seen = redis.call('HLEN', base), {}
  local before = n
  for i = from, #ARGV, 2 do
    if not seen[ARGV[i]] then
      seen[ARGV[i]] = true
      if redis.call('HEXISTS', base, ARGV[i]) == 0 then n = n + 1 end
    end
  end
  if n > before and n > m then return redis.error_reply('FIELDLIMIT ' .. max) end
  return nil
end
local function wrange(now, g, span, fixed)
  local cur = now - (now % g)
  local first = cur - span + g
  if fixed == '1' then first = now - (now % span) end
  return first, cur
end
`

// addScript: ARGV kind (” = existing additive kind or counter), delta,
// now_ms, maycreate, shards, random, shard (-1 = random), gran_ms, span_ms,
// fixed, at_ms (a window add's event time; 0 = now: contract.Op.At, an
// older bucket than the window's is TOOLATE, a later time counts now). Reply {'OK', kind, version, shard, values...}: shard is the shard
// added to (-1 unless sharded); values are the value for a counter, every
// shard for sharded, the in-window bucket values for window.
var addScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss, created = kindcheck(ARGV[1], ARGV[4])
if err and ARGV[1] == 'counter' and redis.call('HGET', meta, 'kind') == 'float' then kind, err = 'float', nil end
if miss then return {'MISS'} end
if err then return err end
if kind == '' then kind = 'counter' end
local delta, now = ARGV[2], ARGV[3]
if kind == 'float' then
  -- Redis's INCR after INCRBYFLOAT: an integer text is a counter again.
  local r = redis.pcall('INCRBY', base, delta)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'overflow', 1, true) then return redis.error_reply('OVERFLOW ' .. r.err) end
    return redis.error_reply('NOTINTEGER ' .. r.err)
  end
  redis.call('HSET', meta, 'kind', 'counter')
  local ver = bump('counter', now, nil, false)
  return {'OK', 'counter', ver, -1, exact(r, base), 'float'}
end
if kind == 'counter' or kind == 'pn' then
  local e, v = incr('INCRBY', base, nil, delta)
  if e then return e end
  local ver = bump(kind, now, nil, created == true)
  return {'OK', kind, ver, -1, exact(v, base)}
elseif kind == 'sharded' then
  local n = tonumber(redis.call('HGET', meta, 'shards') or ARGV[5])
  local s = tonumber(ARGV[7])
  if s < 0 then s = tonumber(ARGV[6]) % n end
  if s >= n then return redis.error_reply('INVALID shard ' .. s .. ' of ' .. n) end
  local e = incr('INCRBY', base .. ':shard:' .. s, nil, delta)
  if e then return e end
  local ver = bump(kind, now, {'shards', n})
  local res = {'OK', kind, ver, s}
  for i = 0, n - 1 do res[#res + 1] = redis.call('GET', base .. ':shard:' .. i) or '0' end
  return res
elseif kind == 'window' then
  local m = redis.call('HMGET', meta, 'gran', 'span', 'fixed')
  local g = tonumber(m[1] or ARGV[8])
  local span = tonumber(m[2] or ARGV[9])
  local fixed = m[3] or ARGV[10]
  local nowms = tonumber(now)
  local first, cur = wrange(nowms, g, span, fixed)
  local b, life = cur, span + g
  local at = tonumber(ARGV[11] or '0') or 0
  if at > 0 and at < nowms then
    b = at - (at % g)
    if b < first then return redis.error_reply('TOOLATE event time ' .. fmt(at) .. ' ms is older than the window of ' .. fmt(span) .. ' ms') end
    life = math.max(1, b + span + g - nowms)
  end
  local key = base .. ':w:' .. fmt(b)
  local e = incr('INCRBY', key, nil, delta)
  if e then return e end
  redis.call('PEXPIRE', key, fmt(life))
  local ver = bump(kind, now, {'gran', fmt(g), 'span', fmt(span), 'fixed', fixed})
  local res = {'OK', kind, ver, -1}
  for b = first, cur, g do res[#res + 1] = redis.call('GET', base .. ':w:' .. fmt(b)) or '0' end
  return res
end
return redis.error_reply('WRONGKIND counter is a ' .. kind .. ', which Add does not apply to')
`)

// addFloatScript: ARGV increment (text), now_ms, maycreate. INCRBYFLOAT on
// a float counter or a counter (which becomes a float, as a Redis string
// holding an integer does). Reply {'OK', version, new text, previous
// integer value (a converted counter's, else 0), '1' if converted}.
var addFloatScript = writeScript(luaPrelude + luaLockCheck + `
local mk = redis.call('HGET', meta, 'kind')
if not mk and ARGV[3] ~= '1' then return {'MISS'} end
if mk and mk ~= 'float' and mk ~= 'counter' then
  return redis.error_reply('WRONGKIND counter is a ' .. mk .. ', not a float')
end
local prev = '0'
if mk == 'counter' then prev = redis.call('GET', base) or '0' end
local r = redis.pcall('INCRBYFLOAT', base, ARGV[1])
if type(r) == 'table' and r.err then
  if string.find(r.err, 'NaN', 1, true) then return redis.error_reply('FLOATRANGE ' .. r.err) end
  return redis.error_reply('NOTFLOAT ' .. r.err)
end
if mk == 'counter' then redis.call('HSET', meta, 'kind', 'float') end
local ver = bump('float', ARGV[2], nil, not mk)
local conv = '0'
if mk == 'counter' then conv = '1' end
return {'OK', ver, r, prev, conv}
`)

// getScript: ARGV now_ms. Reply {'MISS'} or {'OK', kind, version,
// updated_at_ms, pttl_ms, payload...}; payload is the value (counter),
// the shard values (sharded), gran, span, fixed and then start/value pairs
// of the in-window buckets (window), field/value pairs (hash) or the
// estimate (hll).
var getScript = newScript(luaPrelude + `
local m = redis.call('HMGET', meta, 'kind', 'version', 'updated_at', 'shards', 'gran', 'span', 'fixed')
local kind = m[1]
if not kind then
  if dead() then return {'DEAD'} end
  return {'MISS'}
end
local res = {'OK', kind, m[2] or '0', m[3] or '0', ttlof(ARGV[1])}
if kind == 'counter' or kind == 'pn' or kind == 'float' then
  res[#res + 1] = redis.call('GET', base) or '0'
elseif kind == 'sharded' then
  for i = 0, tonumber(m[4]) - 1 do res[#res + 1] = redis.call('GET', base .. ':shard:' .. i) or '0' end
elseif kind == 'window' then
  local g, span = tonumber(m[5]), tonumber(m[6])
  res[#res + 1] = m[5]; res[#res + 1] = m[6]; res[#res + 1] = m[7]
  local first, cur = wrange(tonumber(ARGV[1]), g, span, m[7])
  for b = first, cur, g do
    local v = redis.call('GET', base .. ':w:' .. fmt(b))
    if v then res[#res + 1] = fmt(b); res[#res + 1] = v end
  end
elseif kind == 'hash' then
  local f = redis.call('HGETALL', base)
  for i = 1, #f do res[#res + 1] = f[i] end
elseif kind == 'hll' then
  res[#res + 1] = tostring(redis.call('PFCOUNT', base))
end
return res
`)

// fillScript caches a record loaded from the next tier, only if the counter
// is still absent (no meta): a counter created or incremented since the
// miss is never overwritten. ARGV kind, version, updated_at_ms, ttl_ms,
// exp (absolute ms of a user TTL, 0 = none), life, payload (value | shard
// values | field/value pairs | raw HLL). A tombstone of the same life or a
// later one wins: the record was loaded before that delete reached the
// next tier.
// Reply 1 if written, 0 if the counter was already there.
var fillScript = newScript(luaPrelude + `
if redis.call('EXISTS', meta) == 1 then return 0 end
local d = redis.call('GET', base .. ':dead')
if d and tonumber(d) >= tonumber(ARGV[6]) then return 0 end
local kind, ttl = ARGV[1], ARGV[4]
if kind == 'counter' or kind == 'pn' or kind == 'hll' or kind == 'float' then
  redis.call('SET', base, ARGV[7], 'PX', ttl)
elseif kind == 'sharded' then
  local n = #ARGV - 6
  for i = 0, n - 1 do redis.call('SET', base .. ':shard:' .. i, ARGV[7 + i], 'PX', ttl) end
  redis.call('HSET', meta, 'shards', n)
elseif kind == 'hash' then
  redis.call('DEL', base)
  if #ARGV > 6 then
    redis.call('HSET', base, unpack(ARGV, 7))
    redis.call('PEXPIRE', base, ttl)
  end
else
  return redis.error_reply('INVALID cannot cache a ' .. kind)
end
redis.call('HSET', meta, 'kind', kind, 'version', ARGV[2], 'updated_at', ARGV[3], 'life', ARGV[6])
if ARGV[5] ~= '0' then redis.call('HSET', meta, 'exp', ARGV[5]) end
redis.call('PEXPIRE', meta, ttl)
return 1
`)

// setScript: ARGV value, check (0/1), expected version, ttl_ms (0 = none),
// now_ms, maycreate. A float counter is replaced (Redis SET over a
// string). Reply {'OK', version, previous value ('0' for a float), 'float'
// if it replaced a float else ”}.
var setScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('counter', ARGV[6])
local was = ''
if err and redis.call('HGET', meta, 'kind') == 'float' then err, was = nil, 'float' end
if miss then return {'MISS'} end
if err then return err end
local cur = tonumber(redis.call('HGET', meta, 'version') or '0')
if ARGV[2] == '1' and tonumber(ARGV[3]) ~= cur then
  return redis.error_reply('VERSIONCONFLICT version is ' .. fmt(cur) .. ', not ' .. ARGV[3])
end
local ttl = tonumber(ARGV[4])
local old = redis.call('GET', base) or '0'
if was == 'float' then old = '0' end
if ttl > 0 then redis.call('SET', base, ARGV[1], 'PX', ARGV[4]) else redis.call('SET', base, ARGV[1]) end
redis.call('HSET', meta, 'kind', 'counter', 'version', fmt(cur + 1), 'updated_at', ARGV[5])
if ttl > 0 then
  redis.call('PEXPIRE', meta, ARGV[4])
  redis.call('HSET', meta, 'exp', fmt(tonumber(ARGV[5]) + ttl))
else
  redis.call('PERSIST', meta)
  redis.call('HDEL', meta, 'exp')
end
return {'OK', cur + 1, old, was}
`)

// haddScript: ARGV now_ms, maycreate, maxfields (0: none), name1, delta1,
// ... All deltas apply
// or none: on an error the ones already applied are undone (a script is
// not rolled back by Redis). Reply {'OK', version, new values in order}.
var haddScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('hash', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local fl = fieldlimit(ARGV[3], 4)
if fl then return fl end
local done = {}
for i = 4, #ARGV, 2 do
  local existed = redis.call('HEXISTS', base, ARGV[i])
  local e = incr('HINCRBY', base, ARGV[i], ARGV[i + 1])
  if e then
    for j = #done, 1, -1 do
      local k, ex = done[j][1], done[j][2]
      local d = ARGV[k + 1]
      if d == '-9223372036854775808' then
        redis.call('HINCRBY', base, ARGV[k], '9223372036854775807')
        redis.call('HINCRBY', base, ARGV[k], '1')
      elseif string.sub(d, 1, 1) == '-' then
        redis.call('HINCRBY', base, ARGV[k], string.sub(d, 2))
      else
        redis.call('HINCRBY', base, ARGV[k], '-' .. d)
      end
      if ex == 0 then redis.call('HDEL', base, ARGV[k]) end
    end
    if redis.call('HLEN', base) == 0 then redis.call('DEL', base) end
    return e
  end
  done[#done + 1] = {i, existed}
end
local ver = bump('hash', ARGV[1])
local res = {'OK', ver}
for i = 4, #ARGV, 2 do res[#res + 1] = redis.call('HGET', base, ARGV[i]) end
return res
`)

// hsetScript: ARGV now_ms, maycreate, nx (0/1), maxfields (0: none),
// name1, value1, ... Sets
// the fields in order (with nx only absent ones). Reply {'OK', version,
// created, then for each pair the value it replaced: ” when the field was
// absent, false when nx skipped it}; version is unchanged when nothing was
// set.
var hsetScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('hash', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local fl = fieldlimit(ARGV[4], 5)
if fl then return fl end
local res = {'OK', 0, 0}
local set = false
for i = 5, #ARGV, 2 do
  local old = redis.call('HGET', base, ARGV[i])
  if old and ARGV[3] == '1' then
    res[#res + 1] = false
  else
    redis.call('HSET', base, ARGV[i], ARGV[i + 1])
    if not old then res[3] = res[3] + 1 end
    res[#res + 1] = old or ''
    set = true
  end
end
if set then
  res[2] = bump('hash', ARGV[1])
else
  res[2] = tonumber(redis.call('HGET', meta, 'version') or '0')
end
return res
`)

// pfaddScript: ARGV now_ms, maycreate, items... Reply {'OK', changed, version}.
var pfaddScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('hll', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local existed = redis.call('HEXISTS', meta, 'kind')
local changed = 0
if #ARGV == 2 then
  changed = redis.call('PFADD', base)
end
for i = 3, #ARGV, 1000 do
  if redis.call('PFADD', base, unpack(ARGV, i, math.min(i + 999, #ARGV))) == 1 then changed = 1 end
end
local ver
if changed == 1 or existed == 0 then
  ver = bump('hll', ARGV[1])
else
  ver = tonumber(redis.call('HGET', meta, 'version'))
end
return {'OK', changed, ver}
`)

// deleteScript: ARGV now_ms, tombstone TTL ms. Removes every key of the
// counter and leaves its tombstone (counter:{id}:dead, the life deleted,
// with the TTL). Reply {1, life} if it existed, else {0, 0}.
var deleteScript = writeScript(luaPrelude + luaLockCheck + `
local m = redis.call('HMGET', meta, 'kind', 'shards', 'gran', 'span', 'fixed', 'life')
if not m[1] then return {redis.call('DEL', base), 0} end
local life = m[6] or '1'
redis.call('DEL', base, meta)
redis.call('SET', base .. ':dead', life, 'PX', ARGV[2])
if m[1] == 'sharded' then
  for i = 0, tonumber(m[2]) - 1 do redis.call('DEL', base .. ':shard:' .. i) end
elseif m[1] == 'window' then
  local g, span = tonumber(m[3]), tonumber(m[4])
  local first, cur = wrange(tonumber(ARGV[1]), g, span, m[5])
  for b = first - span, cur + g, g do redis.call('DEL', base .. ':w:' .. fmt(b)) end
end
return {1, tonumber(life)}
`)

// tombstoneScript: ARGV life, ttl_ms. Leaves the tombstone of a counter
// the next tier holds as deleted at that life, unless the counter or a
// tombstone is there. Reply 1 if written.
var tombstoneScript = newScript(luaPrelude + `
if redis.call('EXISTS', meta) == 1 or dead() then return 0 end
redis.call('SET', base .. ':dead', ARGV[1], 'PX', ARGV[2])
return 1
`)

// expireScript: ARGV ttl_ms (0 = remove the TTL), now_ms. Window buckets
// keep their own TTLs. Reply -1 if the counter does not exist, else its
// version: raised like any write's, except by removing a TTL it did not
// have (as the engine does).
var expireScript = writeScript(luaPrelude + luaLockCheck + `
local m = redis.call('HMGET', meta, 'kind', 'shards', 'exp', 'version')
if not m[1] then return -1 end
if ARGV[1] == '0' and not m[3] then return tonumber(m[4] or '0') end
local keys = {base, meta}
if m[1] == 'sharded' then
  for i = 0, tonumber(m[2]) - 1 do keys[#keys + 1] = base .. ':shard:' .. i end
end
for _, k in ipairs(keys) do
  if ARGV[1] == '0' then redis.call('PERSIST', k) else redis.call('PEXPIRE', k, ARGV[1]) end
end
if ARGV[1] == '0' then
  redis.call('HDEL', meta, 'exp')
else
  redis.call('HSET', meta, 'exp', fmt(tonumber(ARGV[2]) + tonumber(ARGV[1])))
end
return bump(m[1], ARGV[2], nil, false)
`)

// hdelScript: ARGV now_ms, maycreate, names... Removes the fields; never
// creates the counter. Reply {'OK', version, name1, old1, ...} with the
// removed fields and their values (version 0 when nothing was removed).
var hdelScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('hash', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local res = {'OK', 0}
if redis.call('HEXISTS', meta, 'kind') == 0 then return res end
for i = 3, #ARGV do
  local v = redis.call('HGET', base, ARGV[i])
  if v then
    redis.call('HDEL', base, ARGV[i])
    res[#res + 1] = ARGV[i]; res[#res + 1] = v
  end
end
if #res > 2 then res[2] = bump('hash', ARGV[1]) end
return res
`)

// pfmergeScript: KEYS[3..] are the value keys of the sources (hll strings,
// missing ones count as empty). ARGV now_ms, maycreate. Merges them into
// KEYS[1]. Reply {'OK', version, estimate}. The sources are in other slots:
// single Redis only; pfmergeRawScript is the Cluster form.
var pfmergeScript = writeScript(luaPrelude + luaLockCheck + `
local kind, err, miss = kindcheck('hll', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local srcs = {}
for i = 3, #KEYS do srcs[#srcs + 1] = KEYS[i] end
redis.call('PFMERGE', base, unpack(srcs))
local ver = bump('hll', ARGV[1])
return {'OK', ver, tostring(redis.call('PFCOUNT', base))}
`)

// rawPrelude merges raw HLL strings (read by the caller from keys in other
// slots) through scratch keys of the script's own slot: Redis Cluster runs
// a script only on keys of one slot, and PFMERGE reads keys, not values.
// The scratch keys exist only while the script runs.
const rawPrelude = `
-- mergeraw merges ARGV[from..] into the scratch key acc (deleted first).
-- A value that is not a valid HLL deletes the scratch keys and returns a
-- WRONGKIND error reply; nothing else has been written.
local function mergeraw(acc, from)
  local src = acc .. ':src'
  redis.call('DEL', acc)
  for i = from, #ARGV do
    redis.call('SET', src, ARGV[i])
    local r = redis.pcall('PFMERGE', acc, acc, src)
    if type(r) == 'table' and r.err then
      redis.call('DEL', acc, src)
      return redis.error_reply('WRONGKIND source ' .. (i - from + 1) .. ' is not an hll: ' .. r.err)
    end
  end
  redis.call('DEL', src)
end
`

// pfmergeRawScript: ARGV now_ms, maycreate, then the raw HLL strings of the
// sources (missing sources are left out). Merges them into KEYS[1] through
// the scratch key KEYS[1]..':tmp:pfmerge', atomically for the destination.
// Reply {'OK', version, estimate}.
var pfmergeRawScript = writeScript(luaPrelude + luaLockCheck + rawPrelude + `
local kind, err, miss = kindcheck('hll', ARGV[2])
if miss then return {'MISS'} end
if err then return err end
local acc = base .. ':tmp:pfmerge'
local e = mergeraw(acc, 3)
if e then return e end
redis.call('PFMERGE', base, base, acc)
redis.call('DEL', acc)
local ver = bump('hll', ARGV[1])
return {'OK', ver, tostring(redis.call('PFCOUNT', base))}
`)

// pfcountRawScript: KEYS[1] a scratch key, ARGV the raw HLL strings of the
// counters to count. Reply the estimate of their union (PFCOUNT of several
// keys, for keys in several slots).
var pfcountRawScript = newScript(rawPrelude + `
local e = mergeraw(KEYS[1], 1)
if e then return e end
local n = redis.call('PFCOUNT', KEYS[1])
redis.call('DEL', KEYS[1])
return n
`)

var allScripts = []*script{addScript, addFloatScript, getScript, fillScript, setScript, haddScript, hsetScript, pfaddScript, deleteScript, expireScript, hdelScript, pfmergeScript,
	tombstoneScript, pfmergeRawScript, pfcountRawScript, sketchAddScript, sketchFillScript}
