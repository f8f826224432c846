-- Shared by the wrk scripts of bench/compare.sh: every request carries the
-- benchmark tenant's API key, and done() prints one machine-readable line.
-- Non-2xx counts wrk's errors.status: answers with a status of 400 or more.
wrk.headers["X-API-Key"] = "bench-key"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d sockerr=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
