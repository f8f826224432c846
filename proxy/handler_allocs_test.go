//go:build !race

package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestRequestPathAllocatesNothing runs the whole handler (identify, route,
// gate, limiter, headers, forward to an in-process upstream) on a reused
// context.
func TestRequestPathAllocatesNothing(t *testing.T) {
	s := newInProcessServer(t)
	ctx := newCtx()
	var req fasthttp.Request
	ctx.Request.CopyTo(&req)
	run := func() {
		req.CopyTo(&ctx.Request)
		ctx.Response.Reset()
		s.handle(ctx)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	for range 10 {
		run()
	}
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("the request path allocates %.1f times per request", n)
	}
}
