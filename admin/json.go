package admin

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/reply"
)

var bodyTooLargeMsg = "larger than " + strconv.Itoa(MaxBody) + " bytes"

// writeError answers status with the JSON problem body
// {"error": "field: msg", "field": field}; field "" leaves it out.
func writeError(ctx *fasthttp.RequestCtx, status int, field, msg string) {
	reply.Problem{Field: field, Msg: msg}.Write(ctx, status, nil)
}

// writeJSON answers status with v encoded as JSON.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = fasthttp.StatusInternalServerError
		b = []byte(`{"error":"cannot encode the answer"}`)
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.Response.SetBodyRaw(append(b, '\n'))
}
