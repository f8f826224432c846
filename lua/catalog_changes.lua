-- catalog_changes: the entries changed since a pod's generation, read at one
-- instant, or word that the pod must read the whole catalog.
--
-- KEYS[1]  hash of the API's rules: "<tenant>:<resource>" -> JSON document
-- KEYS[2]  hash of the API's tenants: "<id>" -> JSON document
-- KEYS[3]  the catalog's generation (an integer; missing: 0)
-- KEYS[4]  the change log: entry names scored by their last change
-- KEYS[5]  the change log's floor (missing: 0)
-- KEYS[6]  the catalog's epoch (missing: "")
-- KEYS[7]  hash of the API's policies: "<name>" -> JSON document
-- ARGV[1]  the pod's generation
-- ARGV[2]  the pod's epoch
-- Returns  {generation, epoch, 1} when the pod must read everything (another
--          epoch, a generation older than the pod's, or changes older than
--          the log's floor); else {generation, epoch, 0, name, doc, ...} for
--          every entry ("rule:<tenant>:<resource>", "tenant:<id>",
--          "policy:<name>") changed
--          after ARGV[1], doc "" for a deleted one.
local gen = tonumber(redis.call('GET', KEYS[3]) or '0')
local epoch = redis.call('GET', KEYS[6]) or ''
local seen = tonumber(ARGV[1])
if epoch ~= ARGV[2] or gen < seen or seen < tonumber(redis.call('GET', KEYS[5]) or '0') then
  return {gen, epoch, 1}
end
local out = {gen, epoch, 0}
if gen == seen then
  return out
end
for _, name in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. ARGV[1], '+inf')) do
  local hash, field = KEYS[1], string.sub(name, 6)
  if string.sub(name, 1, 7) == 'tenant:' then
    hash, field = KEYS[2], string.sub(name, 8)
  elseif string.sub(name, 1, 7) == 'policy:' then
    hash, field = KEYS[7], string.sub(name, 8)
  end
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', hash, field) or ''
end
return out
