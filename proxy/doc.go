// Package proxy is Sentinel's data plane: the fasthttp server that
// identifies each request, applies the adaptive mode policies and the
// rate-limit decision, and forwards it to a configured upstream pool. The
// control plane (check API, rules, metrics, health) is package admin, on a
// listener of its own.
//
// The request path (handler.go) is, in order: route (route.go) → identity
// (identity.go) → adaptive gate → limiter → concurrency limiter → upstream →
// response headers (hop-by-hop and forwarding headers come from package hop,
// the rate-limit headers and JSON error bodies from internal/reply). It
// allocates nothing on the local fast path once pools are warm;
// handler_allocs_test.go proves it.
//
// The routes and what each is bound to (pool, body timeout, concurrency
// limiter, metrics) are one immutable Table behind an atomic pointer: a
// request loads it once, and a reload builds a new one (NewTable) and
// publishes it (SetTable) while requests in flight finish on theirs
// (table.go).
//
// proxy consumes limit, adaptive and upstream through the small interfaces of
// deps.go, so each part can be replaced by a func-field fake in tests.
package proxy
