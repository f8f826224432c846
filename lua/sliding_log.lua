-- sliding_log: seed 000's sorted set, exact, with leases and request-ID dedupe.
--
-- KEYS[1]  sorted set of permits: member = a unique sequence number, score =
--          the lease's expiry (ms); a permit counts while score + window > now.
-- KEYS[2]  hash: "seq" (the member sequence), "t" (the newest Redis time seen, ms).
-- KEYS[3]  sorted set of request IDs already counted: score = when the ID is
--          forgotten (its permit's expiry + window, ms).
-- ARGV[1]  limit: permits per window (>= 0)
-- ARGV[2]  window in ms (>= 1)
-- ARGV[3]  want: permits asked for (>= 1)
-- ARGV[4]  lease_ttl in ms (>= 0)
-- ARGV[5]  request ID, or "" for none
-- Returns  {granted, remaining, retry_after_ms, reset_ms, duplicate}
--          duplicate is 1 when the request ID was already counted: nothing is
--          taken and granted is 0. retry_after_ms is the window when limit is 0.
-- All keys share one hash tag. A clock that moves backwards is treated as the
-- newest time seen.
local log, meta, ids = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local rid = ARGV[5]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('HGET', meta, 't'))
if last and last > now then now = last end

redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
local dup = 0
if rid ~= '' then
  redis.call('ZREMRANGEBYSCORE', ids, '-inf', now)
  if redis.call('ZSCORE', ids, rid) then dup = 1 end
end
local used = redis.call('ZCARD', log)

local granted = 0
if dup == 0 then
  granted = limit - used
  if granted > want then granted = want end
  if granted < 0 then granted = 0 end
end
if granted > 0 then
  local score = now + lease
  local seq = redis.call('HINCRBY', meta, 'seq', granted)
  local first = seq - granted + 1
  local batch = {}
  for m = first, seq do
    batch[#batch + 1] = score
    batch[#batch + 1] = m
    if #batch >= 1000 then
      redis.call('ZADD', log, unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then redis.call('ZADD', log, unpack(batch)) end
  used = used + granted
  if rid ~= '' then redis.call('ZADD', ids, score + window, rid) end
end
redis.call('HSET', meta, 't', string.format('%d', now))

local retry = 0
if granted == 0 and dup == 0 then
  if limit <= 0 then
    retry = window
  else
    local nth = redis.call('ZRANGE', log, used - limit, used - limit, 'WITHSCORES')
    retry = tonumber(nth[2]) + window - now
  end
end
local reset = 0
local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
if #newest > 0 then
  reset = tonumber(newest[2]) + window - now
  redis.call('PEXPIRE', log, reset + 1000)
end
local keep = reset
if keep < window then keep = window end
redis.call('PEXPIRE', meta, keep + 1000)
local latest = redis.call('ZRANGE', ids, -1, -1, 'WITHSCORES')
if #latest > 0 then redis.call('PEXPIRE', ids, tonumber(latest[2]) - now + 1000) end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {granted, remaining, retry, reset, dup}
