// Package admin is Sentinel's control plane: a second fasthttp listener,
// separate from the proxy's, that serves the check API, the rules and
// tenants APIs, the adaptive state, health, readiness and /metrics.
//
// Requests are routed by a small explicit router (routes.go: an exact match
// on the path and two prefixes) rather than net/http's ServeMux, because the
// check API is performance-sensitive. admin consumes limit and adaptive
// through the small interfaces of deps.go; main wires the concrete types.
// Error answers are the shared JSON problem bodies of internal/reply, with
// the field named: {"error":"tokens_requested: ...","field":"tokens_requested"}.
package admin
