// Package adaptive protects the backend when it is overloaded.
//
// A sampler, off the request path, reads every SampleInterval the host's
// signals (CPU and memory against the container's limits when there are
// any, the Go scheduler's latency, in-flight requests against capacity) plus
// the upstream's error rate and latency against its objective, each
// normalised to [0, 1]. The pressure score is their weighted sum, raised
// to the worst single signal so that one saturated bottleneck (a slow
// upstream while the gateway's CPU idles) is not diluted by idle signals,
// then smoothed (fast up, slow down). Each pod publishes its score to Redis
// with a TTL and acts on the larger of its own score and the cluster's
// average; the same heartbeats count the live pods. That exchange is the
// clusterView's (cluster.go); the Controller keeps sampling and the modes.
//
// A mode machine with hysteresis and a minimum dwell turns the pressure into
// Normal, Moderate, Aggressive or Critical. The request path reads the
// resulting Policy with one atomic load: the limit multiplier (exactly 1 in
// Normal mode), strict enforcement, FREE paused, heavy routes off, PREMIUM
// only with cached reads.
//
// The modes move on a 100-500 ms loop: too slow to stop a step to 10× load.
// In front of each upstream a ConcurrencyLimiter is the first line of
// defence: it learns each route's healthy latency, shrinks the number of
// requests in flight when latency rises as a queue's does, with the requests
// in flight (in the style of Netflix's Gradient2; see gradient.go), and
// admits by priority: PREMIUM may use the whole limit, STANDARD and FREE
// only part of it, so FREE is shed first and PREMIUM keeps a guaranteed share.
//
// A reload stages a new section (Controller.Stage) and commits it: the
// thresholds, weights, hysteresis, objectives and concurrency bounds change
// for the next sample; an upstream whose limiter configuration did not
// change keeps its limiter, the others get a new one. The keys in
// RestartKeys keep their values until a restart.
//
// Each Controller's series (signals, pressures, mode, multiplier, live pods,
// cluster errors, and its limiters' limits, in-flight requests, sheds,
// back-offs, congestion cuts and re-measured baselines) live in a metrics.Set of its own, registered from New to Stop.
package adaptive
