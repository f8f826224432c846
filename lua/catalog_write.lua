-- catalog_write: one rule or tenant written or deleted through the admin API,
-- unless Redis holds an older catalog than the writer has seen.
--
-- KEYS[1]  hash of the entries of one kind (rules or tenants): field -> JSON
-- KEYS[2]  the catalog's generation (an integer; missing: 0)
-- ARGV[1]  the writer's generation: the newest it has read or written
-- ARGV[2]  the entry's field
-- ARGV[3]  the entry's JSON document; "" deletes the field
-- ARGV[4]  the change channel
-- ARGV[5]  the change message (the entry's name)
-- Returns  the new generation after the write and the publish; -1 without
--          writing when the stored generation is older than ARGV[1] (Redis lost
--          the catalog, or came back from an old snapshot: the writer restores
--          its own first). No key carries a TTL.
local gen = tonumber(redis.call('GET', KEYS[2]) or '0')
if gen < tonumber(ARGV[1]) then
  return -1
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
end
gen = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return gen
