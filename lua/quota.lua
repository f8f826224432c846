-- quota: a calendar quota, one plain counter per period (a fixed window on
-- calendar boundaries: an hour, a day, a week, a month, a year in a zone).
--
-- KEYS[1]  string: the permits counted in the period that starts at
--          start_ms (the caller puts the period and its start in the key)
-- ARGV[1]  limit: permits per period (0..10^12)
-- ARGV[2]  want: permits asked for (>= need)
-- ARGV[3]  start_ms: the period's start, Unix ms, as the caller computed it
-- ARGV[4]  end_ms: the period's end (the next period's start)
-- ARGV[5]  need (>= 1): the fewest permits worth granting; fewer available
--          grants nothing (all or nothing up to need, partial above it)
-- ARGV[6]  return: unused permits of an earlier lease given back (>= 0)
-- ARGV[7]  return_ref: that lease's ref (the start of the period it was
--          counted in); a return to another period is dropped
-- ARGV[8]  deadline in Redis time (microseconds), 0 for none: a call that
--          runs later grants nothing (its caller has given up on it)
-- ARGV[9]  used: unused here (a used permit counts in its period anyway)
-- ARGV[10] unleased: permits the caller used without a lease
-- ARGV[11] unleased_ago in ms (>= 0): how long before this call the last of
--          them was let through; they count when that is in this period
-- ARGV[12] use_within: unused here
-- ARGV[13..28] unleased_before: up to eight more (permits, ms ago) pairs of
--          permits used without a lease, each counted when its
--          time is in this period
-- Returns  {granted, remaining, retry_after_ms, reset_ms, status, ref, now_us,
--          used_ref, free_ms}
--          status 0; 2 when past the deadline (nothing granted); 4 when
--          Redis' clock is not in [start_ms, end_ms): nothing was read or
--          written, and the caller computes the period again from now_us.
--          ref is start_ms; used_ref is 0 (the need permits count with the
--          rest); retry_after_ms is 0 when granted > 0, -1 when need > limit
--          > 0, else until the period's end; reset_ms and free_ms are until
--          the period's end when anything is counted, else 0.
--
-- Redis' clock decides which period a call is in: the caller computes the
-- period's bounds (the zone's calendar needs Go's zone database) from its
-- estimate of this node's clock, and the script refuses bounds that do not
-- hold TIME, so every pod counts into the period of the same clock whatever
-- its own says. Permits of a period count in it until its end: a new period
-- starts at zero in a new key, and the old key expires a minute after its
-- end. A lease's permits count in the period it was granted in; the caller
-- never uses them past the period's end (reset_ms bounds its lifetime), so
-- no period holds more uses than the limit.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local start = tonumber(ARGV[3])
local finish = tonumber(ARGV[4])
local need = tonumber(ARGV[5])
local ret = tonumber(ARGV[6])
local deadline = tonumber(ARGV[8])

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
if now < start or now >= finish then
  return {0, 0, 0, 0, 4, 0, now_us, 0, 0}
end

local count = tonumber(redis.call('GET', key)) or 0
local before = count
if ret > 0 and tonumber(ARGV[7]) == start then
  count = count - math.min(ret, count)
end
local status = 0
if deadline > 0 and now_us > deadline then
  status = 2
else
  local function count_unleased(n, ago)
    if n > 0 and now - ago >= start then count = count + n end
  end
  count_unleased(tonumber(ARGV[10]), tonumber(ARGV[11]))
  for i = 13, #ARGV - 1, 2 do
    if ARGV[i] then count_unleased(tonumber(ARGV[i]), tonumber(ARGV[i + 1])) end
  end
end

local granted = limit - count
if granted > want then granted = want end
if granted < need or status ~= 0 then granted = 0 end
count = count + granted
if count ~= before then
  redis.call('SET', key, string.format('%d', count), 'PXAT', string.format('%d', finish + 60000))
end

local retry = 0
if granted == 0 then
  retry = finish - now
  if limit > 0 and need > limit then retry = -1 end
end
local reset = 0
if count > 0 then reset = finish - now end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {granted, remaining, retry, reset, status, start, now_us, 0, reset}
