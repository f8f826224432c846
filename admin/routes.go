package admin

import (
	"bytes"
	"crypto/subtle"
	"errors"

	"github.com/valyala/fasthttp"
)

// route names one admin endpoint. Routing is an exact match on the path
// (a switch over the path bytes, which the compiler does without allocating)
// plus three prefixes whose tail is the item's name.
type route uint8

const (
	routeUnknown route = iota
	routeHealthz
	routeReadyz
	routeMetrics
	routeState
	routeCheck
	routeCheckBatch
	routeSettle
	routeUsage
	routeRules
	routeRule
	routeTenants
	routeTenant
	routePolicies
	routePolicy
	routeReload
	routeCounters
	routeCount
)

// routeNames are the values of the endpoint label of the admin metrics.
var routeNames = [routeCount]string{
	routeUnknown:    "unknown",
	routeHealthz:    "healthz",
	routeReadyz:     "readyz",
	routeMetrics:    "metrics",
	routeState:      "state",
	routeCheck:      "check",
	routeCheckBatch: "check_batch",
	routeSettle:     "settle",
	routeUsage:      "usage",
	routeRules:      "rules",
	routeRule:       "rule",
	routeTenants:    "tenants",
	routeTenant:     "tenant",
	routePolicies:   "policies",
	routePolicy:     "policy",
	routeReload:     "reload",
	routeCounters:   "counters",
}

// routeMethods lists the methods each endpoint accepts, as the Allow header
// of a 405 says them.
var routeMethods = [routeCount]string{
	routeHealthz:    "GET",
	routeReadyz:     "GET",
	routeMetrics:    "GET",
	routeState:      "GET",
	routeCheck:      "POST",
	routeCheckBatch: "POST",
	routeSettle:     "POST",
	routeUsage:      "GET",
	routeRules:      "GET",
	routeRule:       "GET, PUT, DELETE",
	routeTenants:    "GET",
	routeTenant:     "GET, PUT, DELETE",
	routePolicies:   "GET",
	routePolicy:     "GET, PUT, DELETE",
	routeReload:     "POST",
	routeCounters:   "DELETE",
}

const (
	rulePrefix   = "/v1/rules/"
	tenantPrefix = "/v1/tenants/"
	policyPrefix = "/v1/policies/"
)

// routeOf finds the endpoint of path.
func routeOf(path []byte) route {
	switch string(path) {
	case "/healthz":
		return routeHealthz
	case "/readyz":
		return routeReadyz
	case "/metrics":
		return routeMetrics
	case "/v1/state":
		return routeState
	case "/v1/ratelimit/check":
		return routeCheck
	case "/v1/ratelimit/check/batch":
		return routeCheckBatch
	case "/v1/ratelimit/settle":
		return routeSettle
	case "/v1/usage":
		return routeUsage
	case "/v1/reload":
		return routeReload
	case "/v1/counters":
		return routeCounters
	case "/v1/rules", "/v1/rules/":
		return routeRules
	case "/v1/tenants", "/v1/tenants/":
		return routeTenants
	case "/v1/policies", "/v1/policies/":
		return routePolicies
	}
	switch {
	case bytes.HasPrefix(path, []byte(rulePrefix)):
		return routeRule
	case bytes.HasPrefix(path, []byte(tenantPrefix)):
		return routeTenant
	case bytes.HasPrefix(path, []byte(policyPrefix)):
		return routePolicy
	}
	return routeUnknown
}

// handle is the admin listener's handler: route, authenticate, check the
// method, serve; every answer is counted by endpoint and status class.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	r := routeOf(ctx.Path())
	s.serveRoute(ctx, r)
	count(r, ctx.Response.StatusCode())
}

func (s *Server) serveRoute(ctx *fasthttp.RequestCtx, r route) {
	switch {
	case s.needsToken(r) && !s.authorized(ctx):
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="sentinel-admin"`)
		writeError(ctx, fasthttp.StatusUnauthorized, "authorization", "missing or wrong bearer token")
		return
	case r == routeUnknown:
		writeError(ctx, fasthttp.StatusNotFound, "path", "no admin endpoint "+string(ctx.Path()))
		return
	case !methodAllowed(r, ctx.Method()):
		ctx.Response.Header.Set("Allow", routeMethods[r])
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "method", string(ctx.Method())+" is not allowed; use "+routeMethods[r])
		return
	}
	switch r {
	case routeHealthz:
		s.healthz(ctx)
	case routeReadyz:
		s.readyz(ctx)
	case routeMetrics:
		s.metrics(ctx)
	case routeState:
		s.state(ctx)
	case routeCheck:
		s.check(ctx)
	case routeCheckBatch:
		s.checkBatch(ctx)
	case routeSettle:
		s.settle(ctx)
	case routeUsage:
		s.usage(ctx)
	case routeRules:
		s.listRules(ctx)
	case routeRule:
		s.rule(ctx)
	case routeTenants:
		s.listTenants(ctx)
	case routeTenant, routePolicy:
		s.named(ctx, r)
	case routePolicies:
		s.listPolicies(ctx)
	case routeReload:
		s.reload(ctx)
	case routeCounters:
		s.resetCounter(ctx)
	}
}

// methodAllowed reports whether method is one of route's methods.
func methodAllowed(r route, method []byte) bool {
	switch r {
	case routeCheck, routeCheckBatch, routeSettle, routeReload:
		return string(method) == fasthttp.MethodPost
	case routeCounters:
		return string(method) == fasthttp.MethodDelete
	case routeRule, routeTenant, routePolicy:
		switch string(method) {
		case fasthttp.MethodGet, fasthttp.MethodPut, fasthttp.MethodDelete:
			return true
		}
		return false
	}
	return string(method) == fasthttp.MethodGet
}

// needsToken reports whether route requires the bearer token. The probes
// /healthz and /readyz do only with server.probes_require_token, /metrics
// only with server.metrics_require_token.
func (s *Server) needsToken(r route) bool {
	if s.token == nil {
		return false
	}
	switch r {
	case routeHealthz, routeReadyz:
		return s.cfg.ProbesRequireToken
	case routeMetrics:
		return s.cfg.MetricsRequireToken
	}
	return true
}

// authorized compares the request's bearer token with server.admin_token in
// constant time.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	const scheme = "Bearer "
	if len(h) < len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) {
		return false
	}
	return subtle.ConstantTimeCompare(bytes.TrimSpace(h[len(scheme):]), s.token) == 1
}

// handleError answers requests fasthttp could not read: a body over
// MaxBody gets 400 naming the body, anything else 400 as well.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, fasthttp.StatusBadRequest, "body", bodyTooLargeMsg)
		return
	}
	writeError(ctx, fasthttp.StatusBadRequest, "request", "cannot read the request: "+err.Error())
}
