// Package upstream sends proxied requests to the configured backends.
//
// A Set holds one Pool per `upstreams.NAME` entry of the configuration. A
// Pool has one fasthttp.HostClient per target (so fasthttp's connection
// pooling, MaxConns, dial and request deadlines do the transport work; its
// RoundTripper, transport, reads answers of up to WholeAnswerMax whole and
// streams the others: see Pool.Do), and
// with `pipeline` set a fasthttp.PipelineClient per target for the GETs
// without a body (see pipeline), and
// picks a target for each request by round robin or least pending among the
// targets that are
//
//   - healthy by the active health checks (GET health_check.path every
//     interval; unhealthy after unhealthy_threshold failures in a row,
//     healthy again after healthy_threshold successes),
//   - not ejected by passive outlier detection (passive.failures consecutive
//     failed requests eject a target for passive.eject_for; then it is
//     re-probed and comes back on probation, where one failure ejects it
//     again), and
//   - admitted by their circuit breaker (closed → open after
//     breaker.failures consecutive failures → half-open after
//     breaker.open_for, admitting breaker.half_open_requests trials → closed
//     when they succeed, open again when one fails).
//
// Classify sorts every answer into one class (Success, ClientFault, Gateway,
// Backpressure, Failure); only Failure (a connection error, a timeout, a 5xx
// other than 503) counts against a target, Backpressure (503, 429) and
// ClientFault count neither way. Ejection and open breakers together hold
// out at most max_ejection_percent of a pool's targets, never the last one;
// when no target is usable the pool balances over all of them (panic mode).
// A request that could not be connected to its target is sent once more to
// another target. Pool.Do's errors map onto the proxy's answers: a
// *ClientBodyError → 400/408/413, ErrTimeout → 504, anything else → 502
// (ErrNoHealthy → 503 only for a pool without targets).
//
// Set.Stage builds the pools of a new configuration for a reload: a pool
// whose configuration did not change is kept as it is (health, ejections,
// breakers, connections), the others are new; Update.Commit makes them
// current and retires the replaced and removed pools once the requests in
// them have finished (their health checks stop, their idle connections
// close, their series are unregistered).
//
// The request path reads and updates only atomics (pending counts, health
// flags, breaker state, failure counts); breaker transitions, which are rare,
// take a per-target mutex. Do allocates nothing beyond what fasthttp does.
//
// Metrics: sentinel_upstream_requests_total{upstream,target,outcome},
// sentinel_upstream_latency_seconds{upstream},
// sentinel_upstream_target_healthy{upstream,target},
// sentinel_upstream_breaker_state{upstream,target} (0 closed, 1 half-open,
// 2 open), sentinel_upstream_breaker_transitions_total{upstream,target,to},
// sentinel_upstream_ejections_total{upstream,target},
// sentinel_upstream_removals_refused_total{upstream,target},
// sentinel_upstream_pipeline_requests_total{upstream,target,path} (pools
// with pipeline set) and sentinel_upstream_panic_total{upstream}.
package upstream
