package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Request checks that run before routing: framing the proxy does not
// forward, the request-target's form and path, and the identity headers.
// Each refusal is one fixed answer (a reason, see reject.go); none
// allocates.

var strAllowed = []byte("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")

var (
	refuseConnect = &reason{status: fasthttp.StatusMethodNotAllowed, msg: "CONNECT is not supported: this is a reverse proxy",
		counter: rejectFraming, close: true, allow: strAllowed}
	refuseOptionsStar = &reason{status: fasthttp.StatusMethodNotAllowed, msg: "OPTIONS * is not supported",
		counter: rejectFraming, allow: strAllowed}
	refuseHTTP2 = &reason{status: fasthttp.StatusHTTPVersionNotSupported, msg: "HTTP/2 is not supported on this port; use HTTP/1.1",
		counter: rejectFraming, close: true}
	refuseTarget = &reason{status: fasthttp.StatusBadRequest, msg: "invalid request target: neither a path nor an http(s) URL",
		counter: rejectBadPath}
	refuseDupAPIKey = &reason{status: fasthttp.StatusBadRequest, msg: "the API key header appears more than once",
		counter: rejectBadHeader}
	refuseDupRequestID = &reason{status: fasthttp.StatusBadRequest, msg: "the request ID header appears more than once",
		counter: rejectBadHeader}
	refuseUnderscore = &reason{status: fasthttp.StatusBadRequest, msg: "header names with underscores are not accepted (server.headers_with_underscores)",
		counter: rejectBadHeader}
	// refusePath holds one reason per pathError.
	refusePath [len(pathErrorText)]reason
)

func init() {
	for e := range refusePath {
		refusePath[e] = reason{status: fasthttp.StatusBadRequest, msg: pathErrorText[e], counter: rejectBadPath}
	}
}

var (
	methodPRI     = []byte("PRI")
	strStar       = []byte("*")
	strHTTP2      = []byte("HTTP/2.0")
	hdrAllow      = []byte("Allow")
	strUnderscore = []byte("_")
)

// prepare checks the request's framing and target and normalises its path.
// On success it returns the normalised path (in id's buffer) and the
// request's query; an absolute-form target's host has replaced the Host
// header (RFC 9112 §3.2.2), so that routing, X-Forwarded-Host and the
// upstream see the same host.
func (s *Server) prepare(ctx *fasthttp.RequestCtx, id *Identity) (path, query []byte, ref *reason) {
	h := &ctx.Request.Header
	// Forward no Content-Type the client did not send.
	h.SetNoDefaultContentType(true)
	target := h.RequestURI()
	switch {
	case h.IsConnect():
		return nil, nil, refuseConnect
	case bytes.Equal(h.Method(), methodPRI) && bytes.Equal(h.Protocol(), strHTTP2):
		return nil, nil, refuseHTTP2
	case bytes.Equal(target, strStar):
		if h.IsOptions() {
			return nil, nil, refuseOptionsStar
		}
		return nil, nil, refuseTarget
	}
	host, raw, query, ok := splitRequestURI(target)
	if !ok {
		return nil, nil, refuseTarget
	}
	if len(host) > 0 {
		h.SetHostBytes(host)
	}
	p, e := normalizePath(id.uriBuf[:0], raw)
	if e != pathOK {
		return nil, nil, &refusePath[e]
	}
	id.uriBuf = p
	return p, query, nil
}

// setTarget makes the request's URI the normalised path (with the matched
// prefix spelled as route r has it) and the original query, when it is not
// that already.
func (s *Server) setTarget(ctx *fasthttp.RequestCtx, r *route, id *Identity, query []byte) {
	if r != nil {
		r.canonicalize(id.uriBuf)
	}
	u := id.uriBuf
	if query != nil {
		u = append(u, '?')
		u = append(u, query...)
	}
	id.uriBuf = u
	if !bytes.Equal(u, ctx.Request.Header.RequestURI()) {
		ctx.Request.SetRequestURIBytes(u)
	}
}

// checkHeaders applies server.headers_with_underscores and refuses
// ambiguous identity headers: the API key twice, or a trusted peer's
// request ID twice. An untrusted client's repeated request ID is dropped
// and replaced by a generated one.
func (s *Server) checkHeaders(ctx *fasthttp.RequestCtx, id *Identity) *reason {
	h := &ctx.Request.Header
	if id.headers&hdrUnderscore != 0 {
		switch s.cfg.Server.HeadersWithUnderscores {
		case UnderscoresReject:
			return refuseUnderscore
		case UnderscoresDrop:
			dropUnderscoreHeaders(h)
		}
	}
	if id.apiKeys > 1 {
		return refuseDupAPIKey
	}
	if id.requestIDs > 1 {
		if id.PeerTrusted {
			return refuseDupRequestID
		}
		h.DelBytes(s.requestIDHeader)
		id.RequestID, id.RequestIDTrusted = s.ids.appendID(id.idBuf[:0]), false
	}
	return nil
}

// dropUnderscoreHeaders deletes every header whose name has an underscore.
func dropUnderscoreHeaders(h *fasthttp.RequestHeader) {
	for {
		var key [64]byte
		k := findHeader(h, key[:0], func(k []byte) bool { return bytes.Contains(k, strUnderscore) })
		if k == nil {
			return
		}
		h.DelBytes(k)
		underscoreDropped.Inc()
	}
}
