-- sliding_window: a ring of sub-window counters (a LeapArray kept in Redis)
-- that counts leased permits until their lease expires plus one window.
--
-- KEYS[1]  hash. Field "t": "T N LO HI", the newest Redis time seen (ms),
--          the sum of the counters and their oldest and newest E (0 0 when
--          N is 0), kept with them ("T" alone: a hash whose sum is not kept).
--          Every other field E (ms, a multiple of the granularity) counts
--          the permits granted whose leases expire before E; they count
--          while E + window > now.
-- ARGV[1]  limit: permits per window (0..10^12)
-- ARGV[2]  window in ms (>= 1)
-- ARGV[3]  want: permits asked for (>= need)
-- ARGV[4]  lease_ttl in ms (>= 0): how long the caller may hold unused permits
-- ARGV[5]  granularity in ms (>= 1): width of one sub-window
-- ARGV[6]  need (>= 1): the fewest permits worth granting; fewer available
--          grants nothing (all or nothing up to need, partial above it)
-- ARGV[7]  return: unused permits of an earlier lease given back (>= 0)
-- ARGV[8]  return_ref: that lease's ref (the field E it was counted in)
-- ARGV[9]  deadline in Redis time (microseconds), 0 for none: a call that
--          runs later grants nothing (its caller has given up on it)
-- ARGV[10] used: permits of that earlier lease the caller has used by now
--          (>= 0); they count from now instead of until its expiry
-- ARGV[11] unleased: permits the caller used without a lease (its
--          own share while the store was unreachable)
-- ARGV[12] unleased_ago in ms (>= 0): how long before this call the last of
--          them was let through; they count from then, for a window
-- ARGV[13] use_within in ms (>= 0): the caller uses the need permits within
--          this of the call (after it, it gives them back); they count from
--          now + use_within
-- ARGV[14..29] unleased_before: up to eight more (permits, ms ago) pairs of
--          permits used without a lease, earlier than unleased's;
--          each counts from its own time, as unleased does
-- V in field "t" ("T N LO HI V") numbers the key's calls: each call's is
-- one more than the last's, and a key made anew (every counter dead) starts
-- again at 1; field "m" is the Redis time (ms) it was made at (apart from
-- "t", whose form an older script still reads). A caller that gets a
-- number no greater than one it saw earlier, while permits it was granted
-- still count, talks to a store that lost writes: emptied, or a replica
-- promoted before it had them.
-- Returns  {granted, remaining, retry_after_ms, reset_ms, status, ref, now_us,
--          used_ref, free_ms, seq, made_ago_ms}
--          status 0, or 2 when past the deadline (nothing granted); ref is
--          the field E of the leased permits (granted - need), used_ref the
--          field of the need permits; retry_after_ms is 0 when granted > 0,
--          the window when limit is 0, -1 when need > limit; reset_ms is
--          when the last counted permit leaves the window, free_ms when the
--          first one does (the oldest live sub-window's end plus the window;
--          0 when nothing is counted): the budget grows back between the two;
--          made_ago_ms is how long ago the key was made ("m"), -1 when its
--          hash, written by an older script, does not say.
--
-- The caller uses need permits at once (within use_within, the time it
-- waits for the answer): they count from then. The rest of a lease granted at t may be
-- used until t + lease_ttl, so it stays counted until at least t + lease_ttl
-- + window: no interval of one window can hold more uses than the limit,
-- whatever the callers do with their leases. (Counting the used permits at
-- the lease's expiry too would make every permit cost window + lease_ttl of
-- budget: a client held at the limit would get limit × window / (window +
-- lease_ttl).) A return uncounts permits the caller will never use, so the
-- invariant holds. A lease used up early is re-dated by the caller's next
-- call (used): its permits were counted from the grant until now, and count
-- from now for a window, which covers every use made by now.
-- The return and used are applied even past the deadline; unleased only
-- before it: a call that Redis runs late (it was paused) would date them
-- when it runs, a whole failure's worth at once, and refuse clients under their
-- limit; its caller reports them again with its next call. A clock that
-- moves backwards is treated as the newest time seen.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local g = tonumber(ARGV[5])
local need = tonumber(ARGV[6])
local ret = tonumber(ARGV[7])
local deadline = tonumber(ARGV[9])
local used = tonumber(ARGV[10])
local unleased = tonumber(ARGV[11])
local unleased_ago = tonumber(ARGV[12])
local use_within = tonumber(ARGV[13])

-- Numbers go to Redis through string.format('%d'): a Lua number given to
-- redis.call is formatted as a double, which costs Redis more.
local fmt = string.format
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

-- The sum and the bounds of the counters are kept in the hash, so that a
-- call reads one field instead of every counter (a hot key holds about
-- 40; reading and parsing them cost Redis more than the rest of the
-- script: BenchmarkRedisHotKeyGrant). The counters are read only to drop
-- the dead ones (when the oldest has left the window: once per sub-window),
-- to find a bound that a return or a report of used permits removed, to
-- list them when refusing, and when the sum is missing (a new key, or one
-- an older script wrote).
local tm = redis.call('HMGET', key, 't', 'm')
local st = tm[1]
if not st and unleased <= 0 and not ARGV[14] then
  -- A key with no hash (new, or gone with its expiry): what the steps
  -- below do for it, without them (nothing to return, scan or report: a
  -- rare key's call, the one most calls are at scale, costs Redis about
  -- half).
  local status, granted, retry = 0, 0, 0
  if deadline > 0 and now_us > deadline then status = 2 end
  if status == 0 and want >= need and limit >= need then
    granted = want
    if granted > limit then granted = limit end
  end
  if limit <= 0 then
    retry = window
  elseif need > limit then
    retry = -1
  end
  local ref, used_ref, reset, free = 0, 0, 0, 0
  if granted > 0 then
    used_ref = (math.floor((now + use_within) / g) + 1) * g
    ref = (math.floor((now + lease) / g) + 1) * g
    local lo, hi = used_ref, used_ref
    if granted > need then
      if ref < lo then lo = ref end
      if ref > hi then hi = ref end
    end
    reset, free = hi + window - now, lo + window - now
    local t, m = fmt('%d %d %d %d 1', now, granted, lo, hi), fmt('%d', now)
    if granted == need or ref == used_ref then
      redis.call('HSET', key, 't', t, 'm', m, fmt('%d', used_ref), fmt('%d', granted))
    else
      redis.call('HSET', key, 't', t, 'm', m, fmt('%d', used_ref), fmt('%d', need), fmt('%d', ref), fmt('%d', granted - need))
    end
  else
    redis.call('HSET', key, 't', fmt('%d 0 0 0 1', now), 'm', fmt('%d', now))
  end
  local keep = reset
  if keep < window then keep = window end
  redis.call('PEXPIRE', key, fmt('%d', keep + 1000))
  return {granted, limit - granted, retry, reset, status, ref, now_us, used_ref, free, 1, 0}
end
local last, n, lo, hi, seq
local made = tonumber(tm[2])
if st then
  local a, b, c, d, v = string.match(st, '^(%d+) (%d+) (%d+) (%d+) ?(%d*)$')
  if a then
    last, n, lo, hi, seq = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(v)
  else
    last = tonumber(st)
  end
end
if last and last > now then now = last end
local horizon = now - window -- a counter at E is live while E > horizon
if n and n <= 0 then n, lo, hi = 0, nil, nil end
-- lost_lo and lost_hi: a return or a report of used permits emptied the
-- counter at that bound; a later count at or beyond it is the bound again, else a scan
-- finds it.
local lost_lo, lost_hi = false, false

-- scan reads every counter: it drops the dead ones, sets n, lo and hi from
-- the live ones and, given a list, lists them as {E, count}.
local function scan(list)
  local raw = redis.call('HGETALL', key)
  local dead = {}
  n, lo, hi, lost_lo, lost_hi = 0, nil, nil, false, false
  for i = 1, #raw, 2 do
    local f = raw[i]
    if f ~= 't' and f ~= 'm' then
      local e, c = tonumber(f), tonumber(raw[i + 1])
      if e and c and e > horizon then
        n = n + c
        if not lo or e < lo then lo = e end
        if not hi or e > hi then hi = e end
        if list then list[#list + 1] = {e, c} end
      else
        dead[#dead + 1] = f
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
end
if n and n > 0 and hi and hi <= horizon then
  -- Every counter is dead (a key too rare for them to stay live): the
  -- hash holds nothing else worth reading, and is written anew below.
  redis.call('DEL', key)
  n, lo, hi, seq, made = 0, nil, nil, nil, nil
elseif not st then
  n = 0 -- no key: every script writes "t"
elseif not n or (n > 0 and not (lo and hi and lo > horizon)) then
  scan()
end

-- fresh holds the counters of a call that found none (a new key, or one
-- whose counters were all dead), {E, count} pairs written with the time and
-- the sum in one HSET instead of an HINCRBY each (BenchmarkRedisSpreadKeysGrant);
-- a scan writes them first.
local fresh = {}
-- fresh_args appends the pairs of fresh to args, as strings.
local function fresh_args(args)
  for i = 1, #fresh do args[#args + 1] = fmt('%d', fresh[i]) end
  return args
end
local function flush()
  if #fresh > 0 then
    redis.call('HSET', key, unpack(fresh_args({})))
    fresh = {}
  end
end
local function count(e, c)
  if n > 0 and #fresh == 0 then
    redis.call('HINCRBY', key, fmt('%d', e), fmt('%d', c))
  else
    local i = 1
    while fresh[i] and fresh[i] ~= e do i = i + 2 end
    fresh[i], fresh[i + 1] = e, (fresh[i + 1] or 0) + c
  end
  if n <= 0 then
    lo, hi, lost_lo, lost_hi = e, e, false, false
  else
    if e < lo or (lost_lo and e == lo) then lo, lost_lo = e, false end
    if e > hi or (lost_hi and e == hi) then hi, lost_hi = e, false end
  end
  n = n + c
end

if ret > 0 or used > 0 then
  local cur = tonumber(redis.call('HGET', key, ARGV[8]))
  if cur then
    local from = tonumber(ARGV[8])
    local to = (math.floor(now / g) + 1) * g
    local r = math.min(ret, cur)
    local m = 0
    if to < from then m = math.min(used, cur - r) end
    if r + m >= cur then
      redis.call('HDEL', key, ARGV[8])
      if from == lo then lost_lo = true end
      if from == hi then lost_hi = true end
    elseif r + m > 0 then
      redis.call('HINCRBY', key, ARGV[8], fmt('%d', -(r + m)))
    end
    n = n - (r + m)
    if n <= 0 then n, lost_lo, lost_hi = 0, false, false end
    if m > 0 then count(to, m) end
  end
end

local function count_unleased(c, ago)
  if c <= 0 then return end
  local at = (math.floor((now - ago) / g) + 1) * g
  if at > horizon then count(at, c) end
end
if not (deadline > 0 and now_us > deadline) then
  count_unleased(unleased, unleased_ago)
  for i = 14, #ARGV - 1, 2 do
    if ARGV[i] then count_unleased(tonumber(ARGV[i]), tonumber(ARGV[i + 1])) end
  end
end

local status = 0
if deadline > 0 and now_us > deadline then status = 2 end
local counted = n
local granted = limit - counted
if granted > want then granted = want end
if granted < need or status ~= 0 then granted = 0 end
local ref, used_ref = 0, 0
if granted > 0 then
  used_ref = (math.floor((now + use_within) / g) + 1) * g
  ref = (math.floor((now + lease) / g) + 1) * g
  count(used_ref, need)
  if granted > need then count(ref, granted - need) end
  counted = counted + granted
end

local retry = 0
if granted == 0 and limit > 0 and need <= limit then
  -- Listed and sorted only here: sorting a hot key's counters on every
  -- call cost Redis more than the rest of the script.
  local live = {}
  flush()
  scan(live)
  table.sort(live, function(a, b) return a[1] < b[1] end)
  local want_free, freed = counted - limit + need, 0
  for _, b in ipairs(live) do
    freed = freed + b[2]
    if freed >= want_free then
      retry = b[1] + window - now
      break
    end
  end
elseif granted == 0 and limit <= 0 then
  retry = window
elseif granted == 0 then
  retry = -1
end
if lost_lo or lost_hi then
  flush()
  scan()
end

local made_ago, fields = -1, {'t', ''}
if not seq then
  made = now -- made anew: numbered from 1, from now
  fields[3], fields[4] = 'm', fmt('%d', now)
elseif not made then
  made = 0 -- numbered by an older script, which keeps no time: not known
end
seq = (seq or 0) + 1
if made > 0 then made_ago = now - made end
local reset, free = 0, 0
if n > 0 then
  reset = hi + window - now
  free = lo + window - now
  fields[2] = fmt('%d %d %d %d %d', now, n, lo, hi, seq)
  redis.call('HSET', key, unpack(fresh_args(fields)))
else
  fields[2] = fmt('%d 0 0 0 %d', now, seq)
  redis.call('HSET', key, unpack(fields))
end
local remaining = limit - counted
if remaining < 0 then remaining = 0 end

local keep = reset
if keep < window then keep = window end
redis.call('PEXPIRE', key, fmt('%d', keep + 1000))
return {granted, remaining, retry, reset, status, ref, now_us, used_ref, free, seq, made_ago}
