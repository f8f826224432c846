package admin

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// readyTimeout bounds one readiness check (a store ping).
const readyTimeout = time.Second

// healthz answers 200 while the process serves requests.
func (s *Server) healthz(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBodyString(`{"status":"ok"}` + "\n")
}

// readyz answers 200 when the pod may take traffic (config loaded, and the
// store reachable or the failure policy lets the pod serve without it), 503
// otherwise; the body says why.
func (s *Server) readyz(ctx *fasthttp.RequestCtx) {
	ready, reason := true, "config loaded"
	if s.deps.Ready != nil {
		c, cancel := context.WithTimeout(context.Background(), readyTimeout)
		ready, reason = s.deps.Ready(c)
		cancel()
	}
	if !ready {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]string{"status": "ready", "reason": reason})
}

// state answers the adaptive state and the limiter's status as JSON.
func (s *Server) state(ctx *fasthttp.RequestCtx) {
	out := make(map[string]any, 2)
	if s.deps.Adaptive != nil {
		out["adaptive"] = s.deps.Adaptive.State()
	}
	out["limiter"] = s.deps.Limiter.Status()
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// metrics answers every registered metric, Go runtime and process metrics
// included, in the Prometheus text format, with the help texts of
// Deps.MetricsHelp.
func (s *Server) metrics(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetStatusCode(fasthttp.StatusOK)
	writeMetrics(ctx, s.deps.MetricsHelp)
}

// requests counts admin answers by endpoint and status class; all counters
// are created up front, so counting allocates nothing.
var requests = func() (c [routeCount][3]*metrics.Counter) {
	classes := [3]string{"2xx", "4xx", "5xx"}
	for r := range c {
		for i, class := range classes {
			c[r][i] = metrics.NewCounter(`sentinel_admin_requests_total{endpoint="` + routeNames[r] + `",code="` + class + `"}`)
		}
	}
	return c
}()

// count counts one answer of endpoint r.
func count(r route, status int) {
	switch {
	case status >= 500:
		requests[r][2].Inc()
	case status >= 400:
		requests[r][1].Inc()
	default:
		requests[r][0].Inc()
	}
}
