package admin

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// BenchmarkCheckHandler is one POST /v1/ratelimit/check on a hot key,
// in-process (no network): the check API's own cost per decision, from the
// parsed request to the answer's head and body. The limiter runs on the
// in-memory store with leases, so a decision is the local fast path.
func BenchmarkCheckHandler(b *testing.B) {
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.Tenant, cfg.APIKey = 1<<39, 1<<39
	a := memServer(b, Config{Listen: "127.0.0.1:0"}, cfg)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/ratelimit/check")
	ctx.Request.SetBodyString(`{"tenant_id":"acme","resource":"default","key":"hot"}`)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		a.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
