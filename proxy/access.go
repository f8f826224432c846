package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/logx"
)

// Outcomes of a request as the access log names them (reasons use their
// message).
const (
	outcomeAllowed     = "allowed"
	outcomeRateLimited = "rate_limited"
	outcomeCached      = "served_from_cache"
)

// accessLog writes one line per request (log.access). Lines of refused
// requests pass a per-second throttle; the next refusal line that passes
// says how many were left out. It is built only when the access log is on,
// so a gateway without it does no work for it on the request path.
type accessLog struct {
	log      *slog.Logger
	refusals *logx.Throttle
}

func newAccessLog(log *slog.Logger, refusalsPerSecond int) *accessLog {
	return &accessLog{log: log, refusals: logx.NewThrottle(refusalsPerSecond)}
}

// write logs the request that ends now.
func (a *accessLog) write(ctx *fasthttp.RequestCtx, x *exchange, start, now time.Time) {
	status := ctx.Response.StatusCode()
	attrs := make([]slog.Attr, 0, 14)
	if status == fasthttp.StatusTooManyRequests || (status == fasthttp.StatusServiceUnavailable && x.outcome != outcomeAllowed) {
		ok, suppressed := a.refusals.Allow(now)
		if !ok {
			return
		}
		if suppressed > 0 {
			attrs = append(attrs, slog.Int("refusals_not_logged", suppressed))
		}
	}
	decision := x.outcome
	if decision == "" {
		decision = "refused"
	}
	if x.outcome == outcomeRateLimited {
		attrs = append(attrs, slog.String("limit", x.decision.Scope.String()))
	}
	attrs = append(attrs,
		slog.String("request_id", string(x.requestID)),
		slog.String("client_ip", string(x.ipText)),
		slog.String("method", string(ctx.Method())),
		slog.String("path", string(ctx.Path())),
		slog.String("tenant", x.tenant),
		slog.String("plan", x.plan),
		slog.String("route", x.resource()),
		slog.String("decision", decision),
		slog.Int("status", status),
		slog.Float64("total_ms", float64(now.Sub(start).Microseconds())/1000),
		slog.Int("bytes_in", max(0, ctx.Request.Header.ContentLength())),
		slog.Int("bytes_out", max(0, ctx.Response.Header.ContentLength())),
	)
	if x.upstreamLatency > 0 {
		target := ""
		if ra := ctx.Response.RemoteAddr(); ra != nil {
			target = ra.String()
		}
		attrs = append(attrs, slog.String("upstream", target),
			slog.Float64("upstream_ms", float64(x.upstreamLatency.Microseconds())/1000))
	}
	a.log.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}
