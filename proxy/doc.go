// Package proxy is Sentinel's data plane and control plane: the fasthttp
// server that identifies each request, applies the adaptive mode policies and
// the rate-limit decision, and forwards it to a configured upstream pool; and
// (in admin*.go) the admin listener.
//
// The request path (handler.go) is, in order: route (route.go) → identity
// (identity.go) → adaptive gate → limiter → concurrency limiter → upstream →
// response headers (headers.go, ratelimit_headers.go). It allocates nothing on
// the local fast path once pools are warm; allocs_test.go proves it.
//
// proxy consumes limit, adaptive and upstream through the small interfaces of
// deps.go, so each part can be replaced by a func-field fake in tests.
package proxy
