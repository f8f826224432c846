package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/proxy/httppath"
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
	// refusePath holds one reason per httppath.Error.
	refusePath [httppath.NumErrors]reason
)

func init() {
	for e := range refusePath {
		refusePath[e] = reason{status: fasthttp.StatusBadRequest, msg: httppath.Error(e).String(), counter: rejectBadPath}
	}
}

var (
	methodPRI = []byte("PRI")
	strStar   = []byte("*")
	strHTTP2  = []byte("HTTP/2.0")
	hdrAllow  = []byte("Allow")
)

// inspect is the request's one pass through framing, routing, identity
// and the header checks, in that order; each of x's fields is written once.
// It returns the reason to refuse the request (reasonNoRoute when no route
// matched), or nil. A request refused for its framing or target is
// neither routed nor header-checked, but still identified: its answer and
// access log line carry its request ID.
func (s *Server) inspect(ctx *fasthttp.RequestCtx, x *exchange) *reason {
	h := &ctx.Request.Header
	path, query, why := s.prepare(ctx, x)
	framed := why == nil
	if framed {
		x.route = s.table.Load().match(h.Host(), path)
		s.setTarget(ctx, x, query)
	}
	reqID := s.identify(ctx, x)
	if framed {
		why = s.checkHeaders(x)
	}
	// Only a repeated ID that passed the checks is an untrusted client's.
	replaceID := why == nil && x.requestIDs > 1
	s.setRequestID(x, reqID, replaceID) // before any header is deleted
	if framed && x.headers&hop.Underscore != 0 && s.cfg.Server.HeadersWithUnderscores == UnderscoresDrop {
		underscoreDropped.Add(hop.DropUnderscores(h))
	}
	if replaceID {
		h.DelBytes(s.requestIDHeader)
	}
	if why == nil && x.route == nil {
		why = reasonNoRoute
	}
	return why
}

// prepare checks the request's framing and target and normalises its path.
// On success it returns the normalised path (in x's buffer) and the
// request's query; an absolute-form target's host has replaced the Host
// header (RFC 9112 §3.2.2), so that routing, X-Forwarded-Host and the
// upstream see the same host.
func (s *Server) prepare(ctx *fasthttp.RequestCtx, x *exchange) (path, query []byte, ref *reason) {
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
	host, raw, query, ok := httppath.SplitRequestURI(target)
	if !ok {
		return nil, nil, refuseTarget
	}
	if len(host) > 0 {
		h.SetHostBytes(host)
	}
	p, e := httppath.Normalize(x.uriBuf[:0], raw)
	if e != httppath.OK {
		return nil, nil, &refusePath[e]
	}
	x.uriBuf = p
	return p, query, nil
}

// setTarget makes the request's URI the normalised path (with the matched
// prefix spelled as x's route has it) and the original query, when it is
// not that already.
func (s *Server) setTarget(ctx *fasthttp.RequestCtx, x *exchange, query []byte) {
	if x.route != nil {
		x.route.canonicalize(x.uriBuf)
	}
	u := x.uriBuf
	if query != nil {
		u = append(u, '?')
		u = append(u, query...)
	}
	x.uriBuf = u
	if !bytes.Equal(u, ctx.Request.Header.RequestURI()) {
		ctx.Request.SetRequestURIBytes(u)
	}
}

// checkHeaders is the refusal that server.headers_with_underscores
// (reject) or an ambiguous identity header calls for: the API key twice,
// or a trusted peer's request ID twice. An untrusted client's repeated
// request ID is no refusal: it is dropped and replaced by a generated one
// (inspect).
func (s *Server) checkHeaders(x *exchange) *reason {
	switch {
	case x.headers&hop.Underscore != 0 && s.cfg.Server.HeadersWithUnderscores == UnderscoresReject:
		return refuseUnderscore
	case x.apiKeys > 1:
		return refuseDupAPIKey
	case x.requestIDs > 1 && x.peerTrusted:
		return refuseDupRequestID
	}
	return nil
}
