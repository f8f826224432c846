-- token_bucket: a bucket with a capacity and a refill rate.
--
-- KEYS[1]  hash {tokens (float), ts (ms, the newest Redis time seen), n
--          (the key's call number)}; a missing key is a full bucket.
-- ARGV[1]  capacity (0..10^12)
-- ARGV[2]  refill rate in permits per second (0, or 10^-6..10^12)
-- ARGV[3]  want: permits asked for (>= need)
-- ARGV[4]  lease_ttl in ms (unused: a lease is taken from the bucket when granted)
-- ARGV[5]  need (>= 1): the fewest permits worth granting; fewer available
--          grants nothing (all or nothing up to need, partial above it)
-- ARGV[6]  return: unused permits of an earlier lease put back (>= 0; the
--          bucket never holds more than its capacity)
-- ARGV[7]  return_ref (unused)
-- ARGV[8]  deadline in Redis time (microseconds), 0 for none: a call that
--          runs later grants nothing (its caller has given up on it)
-- ARGV[9]  used (unused: a taken token counts from the grant)
-- ARGV[10] unleased: tokens the caller used without a lease (its own share
--          while the store was unreachable), taken from the bucket first
--          (it does not go below 0)
-- ARGV[11] unleased_ago in ms (>= 0): how long before this call the last of
--          them was taken
-- ARGV[12] use_within (unused: a taken token counts from the grant)
-- ARGV[13] level + 1 (0: not known): what the caller's last answer for the
--          key left (its remaining), and ARGV[14] how many ms before this
--          call it came; a key that does not exist is made at that level
--          plus the refill since, when that is under the capacity, instead
--          of full: the store lost it (a key expires only once its bucket
--          would be full again), and the caller's last answer bounds what
--          the bucket holds now
-- ARGV[15..30] unleased_before: up to eight more (tokens, ms ago) pairs of
--          tokens used without a lease, earlier than unleased's. The bucket
--          takes every part at its time, oldest first, refilled up to each
--          (a part older than the bucket's last call is taken at that call's
--          time: counted late, never forgotten), then refills up to now.
-- Returns  {granted, remaining, retry_after_ms, reset_ms, status, 0, now_us, 0, 0, seq}
--          granted = min(want, floor(tokens)) when that is >= need, else 0;
--          status 2 when past the deadline (nothing granted), else 0;
--          retry_after_ms is 0 when granted > 0, ceil((need - tokens) / rate
--          * 1000) when refused, -1 when the bucket can never give need
--          permits (rate 0, or capacity < need); reset_ms is the time to
--          refill fully, -1 when never; the last value (free_ms in the
--          sliding scripts: when the first counted permit leaves) is 0, since
--          the bucket refills from now on. Times are capped at 10^12 ms.
--          seq numbers the key's calls: one more than the last call's, 1 for
--          a key made anew, which happens only once a whole refill time has
--          passed since the last call (the key's expiry): a lower number
--          sooner tells the caller that the store lost the key.
-- The key expires once the bucket would be full again (plus 1 s, at most 400
-- days), or after a day when the rate is 0. Every value is computed before
-- the first write, so an error never leaves a key without its TTL. A clock
-- that moves backwards is treated as the newest time seen. The return is
-- applied even past the deadline; the unleased tokens only before it (its
-- caller reports them again with its next call).
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local need = tonumber(ARGV[5])
local ret = tonumber(ARGV[6])
local deadline = tonumber(ARGV[8])
local unleased = tonumber(ARGV[10])
local alone = want == 0 and ret == 0
local maxms = 1000000000000

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

local st = redis.call('HMGET', key, 'tokens', 'ts', 'n')
local tokens, ts = tonumber(st[1]), tonumber(st[2])
local seq = (tonumber(st[3]) or 0) + 1
if tokens == nil or ts == nil then
  tokens, ts = capacity, now
  local level = tonumber(ARGV[13])
  if level > 0 then
    local was = (level - 1) + tonumber(ARGV[14]) * rate / 1000
    if was < tokens then tokens = was end
  end
end
if ts > now then now = ts end
local takes = {}
if not (deadline > 0 and now_us > deadline) then
  if unleased > 0 then takes[1] = {now - tonumber(ARGV[11]), unleased} end
  for i = 15, #ARGV - 1, 2 do
    local n = tonumber(ARGV[i])
    if n > 0 then takes[#takes + 1] = {now - tonumber(ARGV[i + 1]), n} end
  end
  table.sort(takes, function(a, b) return a[1] < b[1] end)
end
for _, take in ipairs(takes) do
  if take[1] > ts then
    tokens = tokens + (take[1] - ts) * rate / 1000
    if tokens > capacity then tokens = capacity end
    ts = take[1]
  end
  -- Tokens used alone while the store was unreachable take the bucket
  -- down to empty at most; a report alone (a cost settled over its
  -- estimate) takes it below: the debt is repaid by the refill before
  -- anything is granted, and nothing takes it away.
  local floor = 0
  if tokens < 0 then floor = tokens end
  tokens = tokens - take[2]
  if tokens < floor and not alone then tokens = floor end
end
tokens = tokens + (now - ts) * rate / 1000 + ret
if tokens > capacity then tokens = capacity end

local status = 0
if deadline > 0 and now_us > deadline then status = 2 end
local granted = math.floor(tokens)
if granted > want then granted = want end
if granted < need or status ~= 0 then granted = 0 end
tokens = tokens - granted

local function ms(x)
  x = math.ceil(x)
  if x > maxms then x = maxms end
  return x
end
local retry = 0
if granted == 0 then
  if rate <= 0 or capacity < need then
    retry = -1
  elseif tokens < need then
    retry = ms((need - tokens) * 1000 / rate)
  end
end
local reset = 0
if tokens < capacity then
  if rate <= 0 then
    reset = -1
  else
    reset = ms((capacity - tokens) * 1000 / rate)
  end
end
local keep = 86400000
if rate > 0 then
  keep = ms(capacity * 1000 / rate) + 1000
  if keep > 34560000000 then keep = 34560000000 end
end

redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', now), 'n', string.format('%d', seq))
redis.call('PEXPIRE', key, string.format('%d', keep))
local remaining = math.floor(tokens)
if remaining < 0 then remaining = 0 end
return {granted, remaining, retry, reset, status, 0, now_us, 0, 0, seq}
