//go:build !race

package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// TestNormalisedPathAllocatesNothing: a path the proxy rewrites (dot
// segments, merged slashes, a decoded escape) and an absolute-form target
// are forwarded without allocating.
func TestNormalisedPathAllocatesNothing(t *testing.T) {
	s := newInProcessServer(t)
	for _, target := range []string{"/api//x/./y/../%7Eitems?id=7", "http://gw.example/api/items?id=7"} {
		ctx := newCtx()
		ctx.Request.SetRequestURI(target)
		var req fasthttp.Request
		ctx.Request.CopyTo(&req)
		run := func() {
			req.CopyTo(&ctx.Request)
			ctx.Response.Reset()
			s.handle(ctx)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("%s: status %d: %s", target, ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
		for range 10 {
			run()
		}
		if n := testing.AllocsPerRun(1000, run); n != 0 {
			t.Fatalf("%s: the request path allocates %.1f times per request", target, n)
		}
	}
}
