-- token_bucket: seed 002's bucket with a capacity and a refill rate.
--
-- KEYS[1]  hash {tokens (float), ts (ms, the newest Redis time seen)}; a
--          missing key is a full bucket.
-- ARGV[1]  capacity (>= 0)
-- ARGV[2]  refill rate in permits per second (>= 0, may be fractional)
-- ARGV[3]  want: permits asked for (>= 1)
-- ARGV[4]  lease_ttl in ms (unused: a lease is taken from the bucket when granted)
-- Returns  {granted, remaining, retry_after_ms, reset_ms, 0}
--          granted = min(want, floor(tokens)); retry_after_ms is 0 when granted > 0,
--          ceil((1 - tokens) / rate * 1000) when empty, -1 when the bucket can
--          never give a permit (rate 0, or capacity < 1); reset_ms is the time to
--          refill fully, -1 when never.
-- The key expires once the bucket would be full again (plus 1 s), or after a
-- day when the rate is 0. A clock that moves backwards is treated as the
-- newest time seen.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local want = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local st = redis.call('HMGET', key, 'tokens', 'ts')
local tokens, ts = tonumber(st[1]), tonumber(st[2])
if tokens == nil or ts == nil then
  tokens, ts = capacity, now
end
if ts > now then now = ts end
tokens = tokens + (now - ts) * rate / 1000
if tokens > capacity then tokens = capacity end

local granted = math.floor(tokens)
if granted > want then granted = want end
if granted < 0 then granted = 0 end
tokens = tokens - granted

local retry = 0
if granted == 0 then
  if rate <= 0 or capacity < 1 then
    retry = -1
  else
    retry = math.ceil((1 - tokens) * 1000 / rate)
  end
end
local reset = 0
if tokens < capacity then
  if rate <= 0 then
    reset = -1
  else
    reset = math.ceil((capacity - tokens) * 1000 / rate)
  end
end

redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', now))
if rate > 0 then
  redis.call('PEXPIRE', key, math.ceil(capacity * 1000 / rate) + 1000)
else
  redis.call('PEXPIRE', key, 86400000)
end
return {granted, math.floor(tokens), retry, reset, 0}
