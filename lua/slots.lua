-- slots: a concurrency limit, slots held across pods, each pod's under a
-- lease that it renews on every call and that frees its slots when it
-- expires (a pod that died gives them back then).
--
-- KEYS[1]  hash: field = pod name, value = "count expiry_ms" (count >= 1,
--          expiry in Redis time, Unix ms); a missing key holds no slot.
-- ARGV[1]  pod: the calling pod's name (its field)
-- ARGV[2]  limit: the most slots held across pods (0..10^12)
-- ARGV[3]  release: slots of this pod's lease given back first (>= 0;
--          clamped at its count)
-- ARGV[4]  want: slots to take after the release (>= need; 0: none)
-- ARGV[5]  need: the fewest slots worth taking; fewer available grants
--          none (all or nothing up to need, partial above it); 0 with want 0
-- ARGV[6]  ttl in ms (1..3600000): the pod's lease lives until now + ttl;
--          every call that leaves the pod slots renews it
-- Returns  {granted, held, in_use, free_in_ms}
--          granted = min(want, limit - in_use after the release) when that
--          is >= need, else 0; held is the pod's count after the call;
--          in_use the slots of every live lease after the call; free_in_ms,
--          when granted < need, is until the soonest lease of another pod
--          expires (0 when no other pod holds any; a pod that renews or
--          releases changes it), else 0.
--
-- Leases that have expired are dropped before anything is counted. A pod
-- whose count falls to 0 loses its field; the key expires a second after
-- its latest lease, so an abandoned key disappears. O(pods) per call.
local key = KEYS[1]
local pod = ARGV[1]
local limit = tonumber(ARGV[2])
local release = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local need = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local margin = 1000 -- ms the key outlives its latest lease

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The live leases: this pod's count, the others' sum, their soonest and
-- latest expiry. Expired (or unreadable) fields are deleted.
local all = redis.call('HGETALL', key)
local held, mine, others, soonest, latest = 0, false, 0, 0, 0
local dead = {}
for i = 1, #all, 2 do
  local c, x = string.match(all[i + 1], '^(%d+) (%d+)$')
  c, x = tonumber(c), tonumber(x)
  if not c or c <= 0 or x <= now then
    dead[#dead + 1] = all[i]
  elseif all[i] == pod then
    held, mine = c, true
  else
    others = others + c
    if soonest == 0 or x < soonest then soonest = x end
    if x > latest then latest = x end
  end
end
for i = 1, #dead, 1000 do
  redis.call('HDEL', key, unpack(dead, i, math.min(i + 999, #dead)))
end

held = held - math.min(release, held)
local granted = limit - others - held
if granted > want then granted = want end
if granted < need then granted = 0 end
held = held + granted

local changed = #dead > 0
if held > 0 then
  local expiry = now + ttl
  redis.call('HSET', key, pod, string.format('%d %d', held, expiry))
  if expiry > latest then latest = expiry end
  changed = true
elseif mine then
  redis.call('HDEL', key, pod)
  changed = true
end
if changed and latest > 0 then
  redis.call('PEXPIRE', key, latest - now + margin)
end

local free = 0
if granted < need and soonest > 0 then free = soonest - now end
return {granted, held, others + held, free}
