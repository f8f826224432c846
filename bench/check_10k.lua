-- wrk script of the check API over 10,000 distinct keys, chosen at random per
-- request. The requests are formatted once per thread in init().
dofile((os.getenv("BENCH_DIR") or "bench") .. "/report.lua")
local keys = 10000
local reqs = {}

function init(args)
  wrk.headers["Content-Type"] = "application/json"
  math.randomseed(os.time() + tonumber(tostring(reqs):match("0x(%x+)") or "0", 16))
  for i = 1, keys do
    local body = string.format('{"tenant_id":"bench","resource":"default","key":"k%d"}', i)
    reqs[i] = wrk.format("POST", "/v1/ratelimit/check", nil, body)
  end
end

function request()
  return reqs[math.random(keys)]
end
