-- One atomic rate-limit check of several limits (docs/ratelimit.md,
-- "Tiered mode"). It decides exactly as ratelimit.Limiter.CheckMulti does.
--
-- KEYS: for hit i, KEYS[2i-1] holds its state and KEYS[2i] the hit log of
--   a sliding_log limit (unused otherwise). All in one hash slot.
-- ARGV[1]: now in unix ns, or "" for Redis' clock (TIME).
-- ARGV[2]: milliseconds added to every TTL.
-- ARGV[3..]: per hit, 6 values: algorithm (1 fixed_window, 2 sliding_window,
--   3 sliding_log, 4 token_bucket, 5 leaky_bucket), limit, period (ns),
--   emission interval and tolerance (ns; buckets, else 0), cost.
-- Returns, per hit, 5 strings: allowed (1/0), remaining, reset, retry
--   after and delay (ns).
--
-- State: fixed_window "window count", sliding_window "window count
-- previous", buckets "tat" (unix ns); sliding_log: the sum of the hits in
-- KEYS[2i-1] and the hits, oldest first, as "ts cost" in the list KEYS[2i].
--
-- Times in ns exceed 2^53, where Lua's numbers (doubles) are no longer
-- exact, so they are non-negative big integers: tables of base 2^24 limbs,
-- least significant first, without leading zero limbs. Counts (at most
-- 2^40) are plain numbers.

if redis.replicate_commands then redis.replicate_commands() end -- TIME before writes, Redis < 5

local B = 16777216
local floor = math.floor
local ZERO, ONE = {}, {1}

local function norm(a)
  local n = #a
  while n > 0 and a[n] == 0 do a[n] = nil; n = n - 1 end
  return a
end

-- bn converts an integer-valued non-negative number (exact double).
local function bn(x)
  local a, i = {}, 1
  while x > 0 do
    local q = floor(x / B)
    a[i] = x - q * B; x = q; i = i + 1
  end
  return a
end

local function tonum(a)
  local x = 0
  for i = #a, 1, -1 do x = x * B + a[i] end
  return x
end

local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function add(a, b)
  local r, c = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= B then r[i] = s - B; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 then r[#r + 1] = c end
  return r
end

local function sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then r[i] = s + B; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 or #b > #a then error('ratelimit: negative big integer (broken invariant)') end
  return norm(r)
end

local function mul(a, b)
  if #a == 0 or #b == 0 then return {} end
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local c, ai = 0, a[i]
    for j = 1, #b do
      local s = r[i + j - 1] + ai * b[j] + c -- < 2^49: exact
      c = floor(s / B); r[i + j - 1] = s - c * B
    end
    local k = i + #b
    while c > 0 do
      local s = r[k] + c
      c = floor(s / B); r[k] = s - c * B; k = k + 1
    end
  end
  return norm(r)
end

-- divmod returns floor(a/b) and a mod b for b > 0. A quotient below 2^48
-- (every division but a few of sliding_window's retry) is estimated in
-- floating point, off by at most 2, and corrected. Otherwise each step
-- subtracts a multiple of b estimated in floating point and scaled down so
-- that it never exceeds the true quotient; three steps reach 128-bit
-- quotients.
local function divmod(a, b)
  if cmp(a, b) < 0 then return {}, a end
  local bf = tonum(b)
  local est = floor(tonum(a) / bf)
  if est < 281474976710656 then
    local p = mul(bn(est), b)
    while cmp(p, a) > 0 do est = est - 1; p = sub(p, b) end
    local r = sub(a, p)
    while cmp(r, b) >= 0 do est = est + 1; r = sub(r, b) end
    return bn(est), r
  end
  local q, r = {}, a
  while cmp(r, b) >= 0 do
    local est = floor(tonum(r) / bf * (1 - 2 ^ -40))
    if est < 1 then est = 1 end
    local e = bn(est)
    r = sub(r, mul(e, b)); q = add(q, e)
  end
  return q, r
end

-- smalldiv divides by m < 2^24 (decimal output).
local function smalldiv(a, m)
  local q, r = {}, 0
  for i = #a, 1, -1 do
    local s = r * B + a[i]
    local d = floor(s / m)
    r = s - d * m
    if r < 0 then d = d - 1; r = r + m elseif r >= m then d = d + 1; r = r - m end
    q[i] = d
  end
  return norm(q), r
end

local function muladd(a, m, c)
  local r = {}
  for i = 1, #a do
    local s = a[i] * m + c
    c = floor(s / B); r[i] = s - c * B
  end
  local i = #a + 1
  while c > 0 do
    local q = floor(c / B)
    r[i] = c - q * B; c = q; i = i + 1
  end
  return norm(r)
end

local function dec(s)
  local n = #s
  if n <= 15 then return bn(tonumber(s)) end -- below 2^53: exact
  local k = n % 7
  if k == 0 then k = 7 end
  local a = bn(tonumber(string.sub(s, 1, k)))
  while k < n do
    a = muladd(a, 10000000, tonumber(string.sub(s, k + 1, k + 7)))
    k = k + 7
  end
  return a
end

local function str(a)
  if #a == 0 then return '0' end
  if #a <= 2 or (#a == 3 and a[3] < 32) then return string.format('%.0f', tonum(a)) end -- below 2^53: exact
  local parts = {}
  while #a > 0 do
    local r
    a, r = smalldiv(a, 10000000)
    parts[#parts + 1] = r
  end
  local out = string.format('%d', parts[#parts])
  for i = #parts - 1, 1, -1 do out = out .. string.format('%07d', parts[i]) end
  return out
end

-- muldivfloor is min(floor(a*b/c), lim); muldivceil is ceil(a*b/c) as a number.
local function muldivfloor(a, b, c, lim)
  local q = divmod(mul(a, b), c)
  if cmp(q, lim) > 0 then return lim end
  return q
end

local function muldivceil(a, b, c)
  local q, r = divmod(mul(a, b), c)
  q = tonum(q)
  if #r > 0 then q = q + 1 end
  return q
end

local function untilexp(exp, now)
  if exp == nil or cmp(exp, now) <= 0 then return ZERO end
  return sub(exp, now)
end

local function split(v)
  local t = {}
  for w in string.gmatch(v, '%S+') do t[#t + 1] = w end
  return t
end

local function newstatus() return {ok = false, rem = 0, reset = ZERO, retry = ZERO, delay = ZERO} end

-- Each decide function returns the status, the state to store if the hit
-- is charged (a string, nil for fresh state) and its expiry.

local function fixed(h, st, now, cost)
  local w = divmod(now, h.p)
  local ws = str(w)
  local cur = 0
  if st and st[1] == ws then cur = tonumber(st[2]) end
  local s = newstatus()
  local room = h.limit - cur
  if math.max(cost, 1) <= room then
    s.ok = true; cur = cur + cost; room = room - cost
  else
    s.retry = sub(mul(add(w, ONE), h.p), now)
  end
  s.rem = math.max(room, 0)
  local exp
  if cur > 0 then exp = mul(add(w, ONE), h.p) end
  s.reset = untilexp(exp, now)
  return s, ws .. ' ' .. string.format('%d', cur), exp
end

local function slidingretry(h, e, cur, prev, need)
  local p, l = h.p, h.limit
  local r = l - cur - need
  if r >= 0 and prev > 0 then
    local e2 = sub(p, muldivfloor(bn(r), p, bn(prev), p))
    if cmp(e2, p) < 0 then return sub(e2, e) end
  end
  local e2 = ZERO
  if cur > 0 then e2 = sub(p, muldivfloor(bn(l - need), p, bn(cur), p)) end
  if cmp(e2, p) < 0 then return add(sub(p, e), e2) end
  return sub(add(p, p), e)
end

local function sliding(h, st, now, cost)
  local p, l = h.p, h.limit
  local w, e = divmod(now, p)
  local ws = str(w)
  local cur, prev = 0, 0
  if st then
    if st[1] == ws then
      cur, prev = tonumber(st[2]), tonumber(st[3])
    elseif #w > 0 and st[1] == str(sub(w, ONE)) then
      prev = tonumber(st[2])
    end
  end
  local room = l - cur
  if prev > 0 then room = room - muldivceil(bn(prev), sub(p, e), p) end
  local need = math.max(cost, 1)
  local s = newstatus()
  if need <= room then
    s.ok = true; cur = cur + cost; room = room - cost
  else
    s.retry = slidingretry(h, e, cur, prev, need)
  end
  s.rem = math.max(room, 0)
  local exp
  if cur > 0 then exp = mul(add(w, {2}), p) elseif prev > 0 then exp = mul(add(w, ONE), p) end
  s.reset = untilexp(exp, now)
  return s, ws .. ' ' .. string.format('%d', cur) .. ' ' .. string.format('%d', prev), exp
end

local function bucket(h, st, now, cost, leaky)
  local t, tol = h.t, h.tol
  local tat = now
  if st then
    local x = dec(st[1])
    if cmp(x, now) > 0 then tat = x end
  end
  local s = newstatus()
  local ahead = sub(add(tat, mul(bn(math.max(cost, 1)), t)), now)
  if cmp(ahead, tol) <= 0 then
    s.ok = true
    if leaky and cost > 0 then s.delay = sub(tat, now) end
    tat = add(tat, mul(bn(cost), t))
  else
    s.retry = sub(ahead, tol)
  end
  local d = sub(tat, now)
  -- (tol - d) / t, truncated toward zero like Go.
  if cmp(tol, d) >= 0 then
    s.rem = tonum((divmod(sub(tol, d), t)))
  else
    s.rem = -tonum((divmod(sub(d, tol), t)))
  end
  s.reset = d
  return s, str(tat), tat
end

-- The sliding log: g = {k1, k2, sum}. logprune drops the hits that left
-- the window; the list is only read where the decision needs it.
local function logentry(v)
  local sp = string.find(v, ' ', 1, true)
  return string.sub(v, 1, sp - 1), tonumber(string.sub(v, sp + 1))
end

local function logprune(h, g, now)
  while g.sum > 0 do
    local v = redis.call('LINDEX', g.k2, 0)
    if not v then break end
    local ts, n = logentry(v)
    if cmp(add(dec(ts), h.p), now) > 0 then break end
    redis.call('LPOP', g.k2)
    g.sum = g.sum - n; g.dirty = true
  end
end

local function lognewest(g)
  if g.sum == 0 then return nil end
  local v = redis.call('LINDEX', g.k2, -1)
  if not v then return nil end
  local ts = logentry(v)
  return ts
end

local function slidinglog(h, g, now, cost)
  logprune(h, g, now)
  local s = newstatus()
  local used = g.sum
  local room = h.limit - used
  local need = math.max(cost, 1)
  local newest = lognewest(g)
  local newestbn = newest and dec(newest)
  if need <= room then
    s.ok = true; room = room - cost
    if cost > 0 then newestbn = now end
  else
    -- The oldest hits leave first: read them in chunks until enough have.
    local left, from, found = used, 0, false
    while not found do
      local chunk = redis.call('LRANGE', g.k2, from, from + 63)
      if #chunk == 0 then break end
      for _, v in ipairs(chunk) do
        local ts, n = logentry(v)
        left = left - n
        if h.limit - left >= need then
          s.retry = sub(add(dec(ts), h.p), now)
          found = true
          break
        end
      end
      from = from + 64
    end
  end
  s.rem = math.max(room, 0)
  if room < h.limit and newestbn then s.reset = untilexp(add(newestbn, h.p), now) end
  return s
end

local function logcommit(g, now, cost)
  if cost == 0 then return end
  local nows = str(now)
  local v = g.sum > 0 and redis.call('LINDEX', g.k2, -1)
  if v then
    local ts, n = logentry(v)
    if ts == nows then
      redis.call('LSET', g.k2, -1, ts .. ' ' .. string.format('%d', n + cost))
      g.sum = g.sum + cost; g.dirty = true
      return
    end
  end
  redis.call('RPUSH', g.k2, nows .. ' ' .. string.format('%d', cost))
  g.sum = g.sum + cost; g.dirty = true
end

-- ttlms is the TTL of state that expires at exp: until then (ms, rounded
-- up) plus the slack.
local function ttlms(exp, now, slack)
  local q, r = divmod(sub(exp, now), bn(1000000))
  q = tonum(q)
  if #r > 0 then q = q + 1 end
  return q + slack
end

local now
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = add(mul(dec(tm[1]), bn(1000000000)), mul(dec(tm[2]), bn(1000)))
else
  now = dec(ARGV[1])
end
local slack = tonumber(ARGV[2])
local n = (#ARGV - 2) / 6
local hits = {}
for i = 1, n do
  local a = 2 + (i - 1) * 6
  local h = {alg = tonumber(ARGV[a + 1]), limit = tonumber(ARGV[a + 2]), p = dec(ARGV[a + 3]),
    t = dec(ARGV[a + 4]), tol = dec(ARGV[a + 5]), cost = tonumber(ARGV[a + 6]),
    k1 = KEYS[2 * i - 1], k2 = KEYS[2 * i]}
  if h.alg == 3 then
    h.g = {k1 = h.k1, k2 = h.k2, sum = tonumber(redis.call('GET', h.k1) or '0')}
  else
    local v = redis.call('GET', h.k1)
    if v then h.st = split(v) end
  end
  hits[i] = h
end

local function decide(h, cost)
  if h.alg == 1 then return fixed(h, h.st, now, cost) end
  if h.alg == 2 then return sliding(h, h.st, now, cost) end
  if h.alg == 3 then return slidinglog(h, h.g, now, cost) end
  return bucket(h, h.st, now, cost, h.alg == 5)
end

local allowed = true
for i = 1, n do
  local h = hits[i]
  h.s, h.next, h.exp = decide(h, h.cost)
  allowed = allowed and h.s.ok
end

local out = {}
for i = 1, n do
  local h = hits[i]
  if allowed then
    if h.alg == 3 then
      logcommit(h.g, now, h.cost)
    elseif h.exp and cmp(h.exp, now) > 0 then
      redis.call('SET', h.k1, h.next, 'PX', ttlms(h.exp, now, slack))
    else
      redis.call('DEL', h.k1) -- back to fresh state
    end
  elseif h.s.ok then
    h.s = decide(h, 0) -- report the state this check left unchanged
  end
  if h.alg == 3 and h.g.dirty then
    if h.g.sum > 0 then
      local ms = ttlms(add(dec(lognewest(h.g)), h.p), now, slack)
      redis.call('SET', h.k1, string.format('%d', h.g.sum), 'PX', ms)
      redis.call('PEXPIRE', h.k2, ms)
    else
      redis.call('DEL', h.k1, h.k2)
    end
  end
  local s = h.s
  out[#out + 1] = s.ok and '1' or '0'
  out[#out + 1] = string.format('%.0f', s.rem)
  out[#out + 1] = str(s.reset)
  out[#out + 1] = str(s.retry)
  out[#out + 1] = str(s.delay)
end
return out
