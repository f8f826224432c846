-- catalog_write: one rule, tenant or policy written or deleted through the admin API,
-- unless Redis holds an older catalog than the writer has seen.
--
-- KEYS[1]  hash of the API's rules: "<tenant>:<resource>" -> JSON document
-- KEYS[2]  hash of the API's tenants: "<id>" -> JSON document
-- KEYS[3]  the catalog's generation (an integer; missing: 0)
-- KEYS[4]  the change log: sorted set of entry names, scored by the
--          generation of their last change
-- KEYS[5]  the change log's floor: the log knows every change after it
-- KEYS[6]  the catalog's epoch
-- KEYS[7]  hash of the API's policies: "<name>" -> JSON document
-- ARGV[1]  the writer's generation: the newest it has read or written
-- ARGV[2]  "rule" (KEYS[1]), "tenant" (KEYS[2]) or "policy" (KEYS[7])
-- ARGV[3]  the entry's field
-- ARGV[4]  the entry's JSON document; "" deletes the field
-- ARGV[5]  the change channel
-- ARGV[6]  the change message and log member: the entry's name
-- ARGV[7]  the epoch to set when there is none (a new history: the log
--          starts at the current generation)
-- ARGV[8]  the log's size past which its oldest tenth is dropped (the floor
--          moves up to the newest dropped)
-- Returns  {the new generation after the write and the publish, epoch};
--          {-1, ""} without writing when the stored generation is older than
--          ARGV[1] (Redis lost the catalog, or came back from an old snapshot:
--          the writer restores its own first). No key carries a TTL.
local gen = tonumber(redis.call('GET', KEYS[3]) or '0')
if gen < tonumber(ARGV[1]) then
  return {-1, ''}
end
local epoch = redis.call('GET', KEYS[6])
if not epoch then
  epoch = ARGV[7]
  redis.call('SET', KEYS[6], epoch)
  redis.call('SET', KEYS[5], gen)
  redis.call('DEL', KEYS[4])
end
local hash = KEYS[1]
if ARGV[2] == 'tenant' then hash = KEYS[2] elseif ARGV[2] == 'policy' then hash = KEYS[7] end
if ARGV[4] == '' then
  redis.call('HDEL', hash, ARGV[3])
else
  redis.call('HSET', hash, ARGV[3], ARGV[4])
end
gen = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], gen, ARGV[6])
local size, most = redis.call('ZCARD', KEYS[4]), tonumber(ARGV[8])
if size > most then
  local dropped = redis.call('ZPOPMIN', KEYS[4], size - most + math.floor(most / 10))
  redis.call('SET', KEYS[5], dropped[#dropped])
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return {gen, epoch}
