package admin

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/reply"
)

var bodyTooLargeMsg = "larger than " + strconv.Itoa(MaxBody) + " bytes"

// writeError answers status with the JSON problem body
// {"error": "field: msg", "field": field}; field "" leaves it out.
func writeError(ctx *fasthttp.RequestCtx, status int, field, msg string) {
	reply.Problem{Field: field, Msg: msg}.Write(ctx, status, nil)
}

// writeBodyError answers a request body that did not decode: 415 when it
// does not look like JSON (an object or a list) and its Content-Type
// declares another format (an HTML form, XML), since "malformed JSON"
// would hide that the API reads JSON only; otherwise 400 naming fe's
// field. A body that looks like JSON is read, and its mistake reported
// (`body: truncated JSON`), whatever its Content-Type: curl -d sends
// application/x-www-form-urlencoded by default.
func writeBodyError(ctx *fasthttp.RequestCtx, fe *catalog.ValidationError) {
	if fe.Field == "body" && !looksLikeJSON(ctx.PostBody()) {
		if mt := mediaType(ctx.Request.Header.ContentType()); declaresOtherFormat(mt) {
			writeError(ctx, fasthttp.StatusUnsupportedMediaType, "Content-Type",
				mt+" is not read; send a JSON object (Content-Type: application/json)")
			return
		}
	}
	writeError(ctx, fasthttp.StatusBadRequest, fe.Field, fe.Msg)
}

// looksLikeJSON reports whether b is meant as JSON: an object or a list,
// whole or not.
func looksLikeJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// mediaType is the lower-case media type of a Content-Type, without
// parameters.
func mediaType(ct []byte) string {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(string(bytes.TrimSpace(ct)))
}

// declaresOtherFormat reports whether media type mt names a format other
// than JSON; none, text/plain and application/octet-stream declare nothing.
func declaresOtherFormat(mt string) bool {
	switch {
	case mt == "", mt == "text/plain", mt == "application/octet-stream",
		mt == "application/json", strings.HasSuffix(mt, "+json"):
		return false
	}
	return true
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
