-- wrk script of the proxy runs: GET / with the API key, one report line.
dofile((os.getenv("BENCH_DIR") or "bench") .. "/report.lua")
wrk.method = "GET"
wrk.path = "/"
