package proxy

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// readyTimeout bounds one readiness check (a store ping).
const readyTimeout = time.Second

// healthz answers 200 while the process serves requests.
func (a *Admin) healthz(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBodyString(`{"status":"ok"}` + "\n")
}

// readyz answers 200 when the pod may take traffic (config loaded, and the
// store reachable or the failure policy lets the pod serve without it), 503
// otherwise; the body says why.
func (a *Admin) readyz(ctx *fasthttp.RequestCtx) {
	ready, reason := true, "config loaded"
	if a.deps.Ready != nil {
		c, cancel := context.WithTimeout(context.Background(), readyTimeout)
		ready, reason = a.deps.Ready(c)
		cancel()
	}
	if !ready {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ready", "reason": reason})
}

// state answers the adaptive state and the limiter's status as JSON.
func (a *Admin) state(ctx *fasthttp.RequestCtx) {
	out := make(map[string]any, 2)
	if a.deps.State != nil {
		out["adaptive"] = a.deps.State()
	}
	if a.deps.Status != nil {
		out["limiter"] = a.deps.Status()
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// metrics answers every registered metric, Go runtime and process metrics
// included, in the Prometheus text format.
func (a *Admin) metrics(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetStatusCode(fasthttp.StatusOK)
	metrics.WritePrometheus(ctx, true)
}

// adminRequests counts admin answers by endpoint and status class; all
// counters are created up front, so counting allocates nothing.
var adminRequests = func() (c [routeCount][3]*metrics.Counter) {
	classes := [3]string{"2xx", "4xx", "5xx"}
	for r := range c {
		for i, class := range classes {
			c[r][i] = metrics.NewCounter(`sentinel_admin_requests_total{endpoint="` + routeNames[r] + `",code="` + class + `"}`)
		}
	}
	return c
}()

func countAdmin(route adminRoute, status int) {
	switch {
	case status >= 500:
		adminRequests[route][2].Inc()
	case status >= 400:
		adminRequests[route][1].Inc()
	default:
		adminRequests[route][0].Inc()
	}
}
