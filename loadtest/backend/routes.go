package main

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// withDemoAPIs serves the endpoints of the quick start's cost and login
// limits, and passes every other request to next (the demobackend handler).
func withDemoAPIs(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/v1/chat/completions":
			chat(ctx)
		case "/login":
			login(ctx)
		default:
			next(ctx)
		}
	}
}

// writeError answers status with {"error":msg}.
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	writeJSON(ctx, map[string]string{"error": msg})
}

// writeJSON answers v as a JSON body.
func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	out, _ := json.Marshal(v)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(out, '\n'))
}
