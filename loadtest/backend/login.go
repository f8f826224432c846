package main

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// demoPassword is the one password /login accepts.
const demoPassword = "demo"

// login serves /login (any method), the target of the failed-login limit
// demo: 200 {"ok":true} when the password is demo, else 401.
func login(ctx *fasthttp.RequestCtx) {
	for _, pw := range passwords(ctx) {
		if subtle.ConstantTimeCompare(pw, []byte(demoPassword)) == 1 {
			writeJSON(ctx, map[string]bool{"ok": true})
			return
		}
	}
	writeError(ctx, fasthttp.StatusUnauthorized, "bad credentials")
}

// passwords returns the passwords the request gives: the X-Password
// header, the password field of a JSON body, and the password field of the
// query or of a urlencoded or multipart form.
func passwords(ctx *fasthttp.RequestCtx) [][]byte {
	var out [][]byte
	if h := ctx.Request.Header.Peek("X-Password"); len(h) > 0 {
		out = append(out, h)
	}
	if body := ctx.PostBody(); bytes.Contains(ctx.Request.Header.ContentType(), []byte("json")) ||
		bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		var in struct {
			Password string `json:"password"`
		}
		if json.Unmarshal(body, &in) == nil && in.Password != "" {
			out = append(out, []byte(in.Password))
		}
	}
	if f := ctx.FormValue("password"); len(f) > 0 {
		out = append(out, f)
	}
	return out
}
