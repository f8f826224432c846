-- catalog_restore: a pod writes its whole catalog back when Redis holds an
-- older one (or none: Redis restarted empty). Atomic, so of several pods
-- restoring at once the one with the newest generation wins, and an older
-- snapshot never replaces a newer one: an entry deleted at generation g does
-- not come back from a pod that last saw g - 1.
--
-- KEYS[1]  hash of the API's rules: "<tenant>:<resource>" -> JSON document
-- KEYS[2]  hash of the API's tenants: "<id>" -> JSON document
-- KEYS[3]  the catalog's generation (an integer; missing: 0)
-- KEYS[4]  the change log (emptied: it knew the lost history)
-- KEYS[5]  the change log's floor (set to ARGV[1]: pods that saw less read all)
-- KEYS[6]  the catalog's epoch (set to ARGV[4])
-- KEYS[7]  hash of the API's policies: "<name>" -> JSON document
-- ARGV[1]  the pod's generation (> 0)
-- ARGV[2]  the channel; "*" (every entry) is published after a restore
-- ARGV[3]  n: the number of rules
-- ARGV[4]  the pod's epoch
-- ARGV[5]  m: the number of tenants
-- ARGV[6 .. 5+2n]              rule field, document pairs
-- ARGV[6+2n .. 5+2n+2m]        tenant field, document pairs
-- ARGV[6+2n+2m .. #ARGV]       policy field, document pairs
-- Returns  {1, ARGV[1]} after replacing the catalog; {0, stored generation}
--          without writing when the stored generation is not older. No key
--          carries a TTL.
local gen = tonumber(redis.call('GET', KEYS[3]) or '0')
local mine = tonumber(ARGV[1])
if gen >= mine then
  return {0, gen}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[7])
local rules = 5 + 2 * tonumber(ARGV[3])
local tenants = rules + 2 * tonumber(ARGV[5])
for i = 6, #ARGV, 2 do
  local key = KEYS[7]
  if i <= rules then key = KEYS[1] elseif i <= tenants then key = KEYS[2] end
  redis.call('HSET', key, ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[3], ARGV[1])
redis.call('SET', KEYS[5], ARGV[1])
redis.call('SET', KEYS[6], ARGV[4])
redis.call('PUBLISH', ARGV[2], '*')
return {1, mine}
