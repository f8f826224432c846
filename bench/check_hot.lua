-- wrk script of the check API with one hot key: every request the same
-- POST /v1/ratelimit/check for tenant bench, key "hot".
dofile((os.getenv("BENCH_DIR") or "bench") .. "/report.lua")
wrk.method = "POST"
wrk.path = "/v1/ratelimit/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"tenant_id":"bench","resource":"default","key":"hot"}'
