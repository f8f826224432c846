package proxy

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"
)

var bodyTooLargeMsg = "larger than " + strconv.Itoa(MaxAdminBody) + " bytes"

func isBodyTooLarge(err error) bool {
	return errors.Is(err, fasthttp.ErrBodyTooLarge)
}

// adminError is the JSON body of every admin error answer. Error starts with
// the field it is about ("tokens_requested: must be between 1 and 1000000").
type adminError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// writeError answers status with {"error": "field: msg", "field": field}.
func writeError(ctx *fasthttp.RequestCtx, status int, field, msg string) {
	e := adminError{Error: msg, Field: field}
	if field != "" {
		e.Error = field + ": " + msg
	}
	writeJSON(ctx, status, e)
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
