-- sliding_window: a ring of sub-window counters (a LeapArray kept in Redis)
-- that counts leased permits until their lease expires plus one window.
--
-- KEYS[1]  hash. Field "t": the newest Redis time seen (ms). Every other
--          field E (ms, a multiple of the granularity) counts the permits
--          granted whose leases expire before E; they count while E + window > now.
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
-- ARGV[11] spent: permits the caller let through without the store (its
--          own share while the store was unreachable)
-- ARGV[12] spent_ago in ms (>= 0): how long before this call the last of
--          them was let through; they count from then, for a window
-- ARGV[13] use_within in ms (>= 0): the caller uses the need permits within
--          this of the call (after it, it gives them back); they count from
--          now + use_within
-- ARGV[14..21] spent_before: up to four more (permits, ms ago) pairs of
--          permits let through without the store, earlier than spent's;
--          each counts from its own time, as spent does
-- Returns  {granted, remaining, retry_after_ms, reset_ms, status, ref, now_us,
--          used_ref, free_ms}
--          status 0, or 2 when past the deadline (nothing granted); ref is
--          the field E of the leased permits (granted - need), used_ref the
--          field of the need permits; retry_after_ms is 0 when granted > 0,
--          the window when limit is 0, -1 when need > limit; reset_ms is
--          when the last counted permit leaves the window, free_ms when the
--          first one does (the oldest live sub-window's end plus the window;
--          0 when nothing is counted): the budget grows back between the two.
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
-- The return and used are applied even past the deadline; spent only before
-- it: a call that Redis runs late (it was paused) would date them when it
-- runs, a whole failure's worth at once, and refuse clients under their
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
local moved = tonumber(ARGV[10])
local spent = tonumber(ARGV[11])
local spent_ago = tonumber(ARGV[12])
local use_within = tonumber(ARGV[13])

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

if ret > 0 or moved > 0 then
  local cur = tonumber(redis.call('HGET', key, ARGV[8]))
  if cur then
    local from = tonumber(ARGV[8])
    local last = tonumber(redis.call('HGET', key, 't'))
    if last and last > now then now = last end
    local to = (math.floor(now / g) + 1) * g
    local r = math.min(ret, cur)
    local m = 0
    if to < from then m = math.min(moved, cur - r) end
    if r + m >= cur then
      redis.call('HDEL', key, ARGV[8])
    elseif r + m > 0 then
      redis.call('HINCRBY', key, ARGV[8], -(r + m))
    end
    if m > 0 then redis.call('HINCRBY', key, string.format('%d', to), m) end
  end
end

local function spend(n, ago)
  if n <= 0 then return end
  local last = tonumber(redis.call('HGET', key, 't'))
  if last and last > now then now = last end
  local at = (math.floor((now - ago) / g) + 1) * g
  if at + window > now then
    redis.call('HINCRBY', key, string.format('%d', at), n)
  end
end
if not (deadline > 0 and now_us > deadline) then
  spend(spent, spent_ago)
  for i = 14, 20, 2 do
    if ARGV[i] then spend(tonumber(ARGV[i]), tonumber(ARGV[i + 1])) end
  end
end

local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do
  if raw[i] == 't' then
    local last = tonumber(raw[i + 1])
    if last and last > now then now = last end
  end
end

local live, dead, used = {}, {}, 0
for i = 1, #raw, 2 do
  local f = raw[i]
  if f ~= 't' then
    local e, n = tonumber(f), tonumber(raw[i + 1])
    if e and n and e + window > now then
      live[#live + 1] = {e, n}
      used = used + n
    else
      dead[#dead + 1] = f
    end
  end
end
if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end

local status = 0
if deadline > 0 and now_us > deadline then status = 2 end
local granted = limit - used
if granted > want then granted = want end
if granted < need or status ~= 0 then granted = 0 end
local ref, used_ref = 0, 0
if granted > 0 then
  used_ref = (math.floor((now + use_within) / g) + 1) * g
  ref = (math.floor((now + lease) / g) + 1) * g
  redis.call('HINCRBY', key, string.format('%d', used_ref), need)
  live[#live + 1] = {used_ref, need}
  if granted > need then
    redis.call('HINCRBY', key, string.format('%d', ref), granted - need)
    live[#live + 1] = {ref, granted - need}
  end
  used = used + granted
end
redis.call('HSET', key, 't', string.format('%d', now))

local retry = 0
if granted == 0 then
  if limit <= 0 then
    retry = window
  elseif need > limit then
    retry = -1
  else
    -- Sorted only here: a hot key holds about 40 fields, and sorting them
    -- on every call cost Redis more than the rest of the script.
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local want_free, freed = used - limit + need, 0
    for _, b in ipairs(live) do
      freed = freed + b[2]
      if freed >= want_free then
        retry = b[1] + window - now
        break
      end
    end
  end
end
local reset, free = 0, -1
for _, b in ipairs(live) do
  local left = b[1] + window - now
  if left > reset then reset = left end
  if free < 0 or left < free then free = left end
end
if free < 0 then free = 0 end
local remaining = limit - used
if remaining < 0 then remaining = 0 end

local keep = reset
if keep < window then keep = window end
redis.call('PEXPIRE', key, string.format('%d', keep + 1000))
return {granted, remaining, retry, reset, status, ref, now_us, used_ref, free}
