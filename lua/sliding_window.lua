-- sliding_window: a ring of sub-window counters (seed 004's LeapArray) that
-- counts leased permits until their lease expires plus one window.
--
-- KEYS[1]  hash. Field "t": the newest Redis time seen (ms). Every other
--          field E (ms, a multiple of the granularity) counts the permits
--          granted whose leases expire before E; they count while E + window > now.
-- ARGV[1]  limit: permits per window (>= 0)
-- ARGV[2]  window in ms (>= 1)
-- ARGV[3]  want: permits asked for (>= 1)
-- ARGV[4]  lease_ttl in ms (>= 0): how long the caller may hold unused permits
-- ARGV[5]  granularity in ms (>= 1): width of one sub-window
-- Returns  {granted, remaining, retry_after_ms, reset_ms, 0}
--          retry_after_ms is 0 when granted > 0, the window when limit is 0.
--
-- A lease granted at t may be used until t + lease_ttl, so it stays counted
-- until at least t + lease_ttl + window: no interval of one window can hold
-- more uses than the limit, whatever the callers do with their leases.
-- A clock that moves backwards is treated as the newest time seen.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local g = tonumber(ARGV[5])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

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

local granted = limit - used
if granted > want then granted = want end
if granted < 0 then granted = 0 end
if granted > 0 then
  local e = (math.floor((now + lease) / g) + 1) * g
  redis.call('HINCRBY', key, string.format('%d', e), granted)
  live[#live + 1] = {e, granted}
  used = used + granted
end
redis.call('HSET', key, 't', string.format('%d', now))

table.sort(live, function(a, b) return a[1] < b[1] end)
local retry = 0
if granted == 0 then
  if limit <= 0 then
    retry = window
  else
    local need, freed = used - limit + 1, 0
    for _, b in ipairs(live) do
      freed = freed + b[2]
      if freed >= need then
        retry = b[1] + window - now
        break
      end
    end
  end
end
local reset = 0
if #live > 0 then reset = live[#live][1] + window - now end
local remaining = limit - used
if remaining < 0 then remaining = 0 end

local keep = reset
if keep < window then keep = window end
redis.call('PEXPIRE', key, keep + 1000)
return {granted, remaining, retry, reset, 0}
