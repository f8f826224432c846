-- catalog_read: the whole catalog (rules, tenants, policies) with its generation and
-- epoch, read at one instant.
--
-- KEYS[1]  hash of the API's rules: "<tenant>:<resource>" -> JSON document
-- KEYS[2]  hash of the API's tenants: "<id>" -> JSON document
-- KEYS[3]  the catalog's generation (an integer; missing: 0)
-- KEYS[4]  the change log (unused here)
-- KEYS[5]  the change log's floor (unused here)
-- KEYS[6]  the catalog's epoch: names its history (missing: "")
-- KEYS[7]  hash of the API's policies: "<name>" -> JSON document
-- ARGV[1]  unused (scripts are called with at least one argument)
-- Returns  {generation, {field, doc, ...} of KEYS[1], {field, doc, ...} of
--          KEYS[2], epoch, {field, doc, ...} of KEYS[7]}
-- The keys carry no TTL: the catalog is configuration, not counters.
local gen = tonumber(redis.call('GET', KEYS[3]) or '0')
return {gen, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]), redis.call('GET', KEYS[6]) or '',
  redis.call('HGETALL', KEYS[7])}
