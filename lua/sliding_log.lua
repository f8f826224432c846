-- sliding_log: an exact sorted-set log, with leases, returns and spared
-- retries of a request ID.
--
-- KEYS[1]  sorted set of permits: member = a unique sequence number, score =
--          when it may last be used (ms): the call plus use_within for the
--          need permits the caller uses at once, the lease's expiry for the rest;
--          a permit counts while score + window > now.
-- KEYS[2]  hash: "seq" (the member sequence), "t" (the newest Redis time seen,
--          ms), "n" (the key's call number), "m" (the Redis time the key
--          was made at, ms: when "n" started at 1).
-- KEYS[3]  sorted set of request IDs already counted: score = forget * 16 +
--          spared, where forget is when the ID is forgotten (the counted
--          call plus id_window, ms) and spared how many of its repeats were
--          not counted (0..15).
-- ARGV[1]  limit: permits per window (0..10^12)
-- ARGV[2]  window in ms (>= 1)
-- ARGV[3]  want: permits asked for (need..1000: one member per permit, so a
--          call is bounded)
-- ARGV[4]  lease_ttl in ms (>= 0)
-- ARGV[5]  request ID, or "" for none
-- ARGV[6]  need (>= 1): the fewest permits worth granting; fewer available
--          grants nothing (all or nothing up to need, partial above it)
-- ARGV[7]  return: unused permits of an earlier lease given back (0..1000)
-- ARGV[8]  return_ref: that lease's ref (its last member); the members
--          return_ref - return + 1 .. return_ref are removed
-- ARGV[9]  deadline in Redis time (microseconds), 0 for none: a call that
--          runs later grants nothing (its caller has given up on it)
-- ARGV[10] used: permits of that earlier lease the caller has used by now
--          (0..1000): the members return_ref - return - used + 1 ..
--          return_ref - return (the lease's permits before the returned
--          ones) are dated now when that is earlier than their score
-- ARGV[11] unleased: permits the caller used without a lease (its
--          own share while the store was unreachable; 0..1000)
-- ARGV[12] unleased_ago in ms (>= 0): how long before this call the last of
--          them was let through; they are scored then
-- ARGV[13] use_within in ms (>= 0): the caller uses the need permits within
--          this of the call (after it, it gives them back); they are scored
--          now + use_within
-- ARGV[14] id_retries (0..15): how many repeats of a counted request ID are
--          spared; a repeat past them is counted as a new request
-- ARGV[15] id_window in ms (>= 0): how long after the counted call its
--          repeats are spared; the first call after it is counted afresh
-- ARGV[16..31] unleased_before: up to eight more (permits, ms ago) pairs of
--          permits used without a lease, earlier than unleased's; each is
--          scored at its own time, as unleased is (unleased and these
--          together at most 1000)
-- Returns  {granted, remaining, retry_after_ms, reset_ms, status, ref, now_us,
--          used_ref, free_ms, seq, made_ago_ms}
--          status 1 when the request ID repeats within its allowance
--          (spared: nothing is taken, granted is 0), 2 when past the deadline
--          (nothing granted), 3 when it repeats past its allowance (counted
--          as a new request), else 0; ref is the last member of this grant (the leased permits
--          are its last granted - need members), used_ref the last of its
--          need permits (its first members); retry_after_ms is the window
--          when limit is 0, -1 when need > limit; reset_ms is when the last
--          counted permit leaves the window (the newest score plus the
--          window), free_ms when the first one does (the oldest score plus
--          the window; 0 when nothing is counted); seq numbers the key's
--          calls, one more than the last call's, 1 for a key made anew, which
--          happens only once no permit of it counts (the hash expires a window
--          after the last one): a lower number sooner tells the caller that
--          the store lost the key; made_ago_ms is how long ago it was made
--          ("m"), -1 when its hash, written by an older script, does not say.
-- All keys share one hash tag. A clock that moves backwards is treated as the
-- newest time seen. The return and used are applied even past the deadline;
-- unleased only before it (a call run late would date them late: its caller
-- reports them again with its next call).
local log, meta, ids = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local rid = ARGV[5]
local need = tonumber(ARGV[6])
local ret = tonumber(ARGV[7])
local ret_ref = tonumber(ARGV[8])
local deadline = tonumber(ARGV[9])
local used = tonumber(ARGV[10])
local unleased = tonumber(ARGV[11])
local unleased_ago = tonumber(ARGV[12])
local use_within = tonumber(ARGV[13])
local id_retries = tonumber(ARGV[14])
local id_window = tonumber(ARGV[15])

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local tm = redis.call('HMGET', meta, 't', 'm')
local last, made = tonumber(tm[1]), tonumber(tm[2])
if last and last > now then now = last end

if ret > 0 then
  local batch = {}
  for m = ret_ref - ret + 1, ret_ref do
    batch[#batch + 1] = string.format('%d', m)
  end
  redis.call('ZREM', log, unpack(batch))
end

redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
if used > 0 then
  -- The members of one lease share its expiry as their score: one ZSCORE
  -- tells whether they still count and would count later than now (as
  -- ZADD XX LT would, which needs Redis 6.2).
  local first = ret_ref - ret - used + 1
  local score = tonumber(redis.call('ZSCORE', log, string.format('%d', first)))
  if score and score > now then
    local batch = {}
    for m = first, ret_ref - ret do
      batch[#batch + 1] = now
      batch[#batch + 1] = string.format('%d', m)
    end
    redis.call('ZADD', log, 'XX', unpack(batch))
  end
end
local late = deadline > 0 and now_us > deadline
local function log_unleased(n, ago)
  if n <= 0 or ago >= window then return end
  local last_seq = redis.call('HINCRBY', meta, 'seq', n)
  local batch = {}
  for m = last_seq - n + 1, last_seq do
    batch[#batch + 1] = now - ago
    batch[#batch + 1] = m
  end
  redis.call('ZADD', log, unpack(batch))
end
if not late then
  log_unleased(unleased, unleased_ago)
  for i = 16, #ARGV - 1, 2 do
    if ARGV[i] then log_unleased(tonumber(ARGV[i]), tonumber(ARGV[i + 1])) end
  end
end
local status, repeated, id_score = 0, false, nil
-- ids_written: this call recorded an ID. Only then can the newest ID, and
-- so the expiry of the IDs' key, change: a call without one leaves that key
-- alone (most calls carry no ID; BenchmarkRedisHotKeyGrant measures it).
local ids_written = false
if rid ~= '' then
  -- An ID is forgotten once forget <= now: score <= now * 16 + 15.
  redis.call('ZREMRANGEBYSCORE', ids, '-inf', now * 16 + 15)
  id_score = tonumber(redis.call('ZSCORE', ids, rid))
  if id_score then
    if id_score % 16 < id_retries then status = 1 else repeated = true end
  end
end
if status == 0 and deadline > 0 and now_us > deadline then status = 2 end
local counted = redis.call('ZCARD', log)

local granted = 0
if status == 0 then
  granted = limit - counted
  if granted > want then granted = want end
  if granted < need then granted = 0 end
end
local ref, used_ref = 0, 0
if granted > 0 then
  local score = now + lease
  ref = redis.call('HINCRBY', meta, 'seq', granted)
  used_ref = ref - granted + need
  local batch = {}
  for m = ref - granted + 1, ref do
    if m <= used_ref then batch[#batch + 1] = now + use_within else batch[#batch + 1] = score end
    batch[#batch + 1] = m
  end
  redis.call('ZADD', log, unpack(batch))
  counted = counted + granted
  -- A repeat past its allowance keeps the ID's record (forget time and
  -- spared count): re-recording it would spare its next repeats again.
  if rid ~= '' and not repeated and id_retries > 0 and id_window > 0 then
    redis.call('ZADD', ids, (now + id_window) * 16, rid)
    ids_written = true
  end
end
if status == 1 then
  redis.call('ZADD', ids, id_score + 1, rid)
  ids_written = true
end
if status == 0 and repeated then status = 3 end
local seq = redis.call('HINCRBY', meta, 'n', 1)
local made_ago = -1
if seq == 1 then
  made = now
  redis.call('HSET', meta, 't', string.format('%d', now), 'm', string.format('%d', now))
else
  redis.call('HSET', meta, 't', string.format('%d', now))
end
if made then made_ago = now - made end

local retry = 0
if granted == 0 and status ~= 1 then
  if limit <= 0 then
    retry = window
  elseif need > limit then
    retry = -1
  else
    local nth = counted - limit + need - 1
    if nth >= 0 then
      local r = redis.call('ZRANGE', log, nth, nth, 'WITHSCORES')
      retry = tonumber(r[2]) + window - now
    end
  end
end
local reset = 0
local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
if #newest > 0 then
  reset = tonumber(newest[2]) + window - now
  redis.call('PEXPIRE', log, string.format('%d', reset + 1000))
end
local free = 0
local oldest = redis.call('ZRANGE', log, 0, 0, 'WITHSCORES')
if #oldest > 0 then
  free = tonumber(oldest[2]) + window - now
  if free < 0 then free = 0 end
end
local keep = reset
if keep < window then keep = window end
redis.call('PEXPIRE', meta, string.format('%d', keep + 1000))
if ids_written then
  local latest = redis.call('ZRANGE', ids, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', ids, string.format('%d', math.floor(tonumber(latest[2]) / 16) - now + 1000))
end
local remaining = limit - counted
if remaining < 0 then remaining = 0 end
return {granted, remaining, retry, reset, status, ref, now_us, used_ref, free, seq, made_ago}
