package proxy

import (
	"bytes"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// adminRoute names one admin endpoint. Routing is an exact match on the path
// (a switch over the path bytes, which the compiler does without allocating)
// plus two prefixes whose tail is the item's name.
type adminRoute uint8

const (
	routeUnknown adminRoute = iota
	routeHealthz
	routeReadyz
	adminRouteMetrics
	routeState
	routeCheck
	routeCheckBatch
	routeRules
	routeRule
	routeTenants
	routeTenant
	routeCount
)

// routeNames are the values of the endpoint label of the admin metrics.
var routeNames = [routeCount]string{
	routeUnknown:      "unknown",
	routeHealthz:      "healthz",
	routeReadyz:       "readyz",
	adminRouteMetrics: "metrics",
	routeState:        "state",
	routeCheck:        "check",
	routeCheckBatch:   "check_batch",
	routeRules:        "rules",
	routeRule:         "rule",
	routeTenants:      "tenants",
	routeTenant:       "tenant",
}

// routeMethods lists the methods each endpoint accepts, as the Allow header
// of a 405 says them.
var routeMethods = [routeCount]string{
	routeHealthz:      "GET",
	routeReadyz:       "GET",
	adminRouteMetrics: "GET",
	routeState:        "GET",
	routeCheck:        "POST",
	routeCheckBatch:   "POST",
	routeRules:        "GET",
	routeRule:         "GET, PUT, DELETE",
	routeTenants:      "GET",
	routeTenant:       "GET, PUT, DELETE",
}

const (
	rulePrefix   = "/v1/rules/"
	tenantPrefix = "/v1/tenants/"
)

// routeOf finds the endpoint of path.
func routeOf(path []byte) adminRoute {
	switch string(path) {
	case "/healthz":
		return routeHealthz
	case "/readyz":
		return routeReadyz
	case "/metrics":
		return adminRouteMetrics
	case "/v1/state":
		return routeState
	case "/v1/ratelimit/check":
		return routeCheck
	case "/v1/ratelimit/check/batch":
		return routeCheckBatch
	case "/v1/rules", "/v1/rules/":
		return routeRules
	case "/v1/tenants", "/v1/tenants/":
		return routeTenants
	}
	switch {
	case bytes.HasPrefix(path, []byte(rulePrefix)):
		return routeRule
	case bytes.HasPrefix(path, []byte(tenantPrefix)):
		return routeTenant
	}
	return routeUnknown
}

// handle is the admin listener's handler: route, authenticate, check the
// method, serve.
func (a *Admin) handle(ctx *fasthttp.RequestCtx) {
	route := routeOf(ctx.Path())
	if a.needsToken(route) && !a.authorized(ctx) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="sentinel-admin"`)
		writeError(ctx, fasthttp.StatusUnauthorized, "authorization", "missing or wrong bearer token")
		countAdmin(route, ctx.Response.StatusCode())
		return
	}
	if route == routeUnknown {
		writeError(ctx, fasthttp.StatusNotFound, "path", "no admin endpoint "+string(ctx.Path()))
		countAdmin(route, ctx.Response.StatusCode())
		return
	}
	if !methodAllowed(route, ctx.Method()) {
		ctx.Response.Header.Set("Allow", routeMethods[route])
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "method", string(ctx.Method())+" is not allowed; use "+routeMethods[route])
		countAdmin(route, ctx.Response.StatusCode())
		return
	}
	a.serveRoute(ctx, route)
	countAdmin(route, ctx.Response.StatusCode())
}

func (a *Admin) serveRoute(ctx *fasthttp.RequestCtx, route adminRoute) {
	switch route {
	case routeHealthz:
		a.healthz(ctx)
	case routeReadyz:
		a.readyz(ctx)
	case adminRouteMetrics:
		a.metrics(ctx)
	case routeState:
		a.state(ctx)
	case routeCheck:
		a.check(ctx)
	case routeCheckBatch:
		a.checkBatch(ctx)
	case routeRules:
		a.listRules(ctx)
	case routeRule:
		a.rule(ctx)
	case routeTenants:
		a.listTenants(ctx)
	case routeTenant:
		a.tenant(ctx)
	}
}

// methodAllowed reports whether method is one of route's methods.
func methodAllowed(route adminRoute, method []byte) bool {
	switch route {
	case routeCheck, routeCheckBatch:
		return string(method) == fasthttp.MethodPost
	case routeRule, routeTenant:
		switch string(method) {
		case fasthttp.MethodGet, fasthttp.MethodPut, fasthttp.MethodDelete:
			return true
		}
		return false
	}
	return string(method) == fasthttp.MethodGet
}

// needsToken reports whether route requires the bearer token. /healthz never
// does; /metrics does only with server.metrics_require_token.
func (a *Admin) needsToken(route adminRoute) bool {
	if a.token == nil {
		return false
	}
	switch route {
	case routeHealthz:
		return false
	case adminRouteMetrics:
		return a.deps.Config.MetricsRequireToken
	}
	return true
}

// authorized compares the request's bearer token with server.admin_token in
// constant time.
func (a *Admin) authorized(ctx *fasthttp.RequestCtx) bool {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	const scheme = "Bearer "
	if len(h) < len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) {
		return false
	}
	return subtle.ConstantTimeCompare(bytes.TrimSpace(h[len(scheme):]), a.token) == 1
}

// handleError answers requests fasthttp could not read: a body over
// MaxAdminBody gets 400 naming the body, anything else 400 as well.
func (a *Admin) handleError(ctx *fasthttp.RequestCtx, err error) {
	if isBodyTooLarge(err) {
		writeError(ctx, fasthttp.StatusBadRequest, "body", bodyTooLargeMsg)
		return
	}
	writeError(ctx, fasthttp.StatusBadRequest, "request", "cannot read the request: "+err.Error())
}
