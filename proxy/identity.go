package proxy

import (
	"bytes"
	"net/netip"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/proxy/reqid"
)

// identify writes x's identity: the peer and client addresses, the API key
// and its tenant, and what the header scan found. It returns the first
// request ID header's value, which setRequestID judges once the header
// checks are done.
func (s *Server) identify(ctx *fasthttp.RequestCtx, x *exchange) (reqID []byte) {
	h := &ctx.Request.Header
	peer := peerAddr(ctx)
	trusted := s.trusted.Contains(peer)
	ip := peer
	if trusted {
		ip = hop.ClientIP(h, peer, s.trusted)
	}
	x.peer, x.peerTrusted, x.ip = peer, trusted, ip
	x.ipText = ip.AppendTo(x.ipBuf[:0])
	reqID = s.scanHeaders(h, x)
	x.tenant, x.plan, x.anonymous = s.tenantOf(x.apiKey)
	return reqID
}

// peerAddr is the IP address of ctx's peer: the listener's connection
// knows it from accept (deadline.Listen's connections do), else it is read
// from RemoteAddr the same way.
func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	if c, ok := ctx.Conn().(interface{ PeerAddr() netip.Addr }); ok {
		return c.PeerAddr()
	}
	return deadline.PeerAddr(ctx.RemoteAddr())
}

// tenantOf is the tenant and plan of an API key; a missing or unknown key
// is anonymous, on the FREE plan.
func (s *Server) tenantOf(apiKey []byte) (tenant, plan string, anonymous bool) {
	if len(apiKey) > 0 && s.tenants != nil {
		if t, ok := s.tenants.LookupAPIKey(apiKey); ok && t != nil {
			return t.ID, string(t.Plan), false
		}
	}
	return "", catalog.PlanFree, true
}

// setRequestID writes x's request ID: the client's (reqID) when it is
// valid and, unless replace, or a generated one. replace is set for an
// untrusted client's repeated request ID on a request that passed the
// header checks; a trusted peer's repeated ID is refused instead, and a
// refused request answers with the client's first ID. The client's ID is
// copied, since dropping headers may reuse the memory it points into.
func (s *Server) setRequestID(x *exchange, reqID []byte, replace bool) {
	if replace || !reqid.Valid(reqID) {
		x.requestID = s.ids.Append(x.idBuf[:0])
		return
	}
	x.requestID = append(x.idBuf[:0], reqID...)
	x.requestIDTrusted = x.peerTrusted && s.trustProxyIDs
}

// scanHeaders is the one pass over the request headers: it writes x's API
// key (the first), the counts of the API key and request ID headers and
// the flags of what needs removing, and returns the first request ID.
func (s *Server) scanHeaders(h *fasthttp.RequestHeader, x *exchange) (reqID []byte) {
	var (
		apiKey              []byte
		apiKeys, requestIDs int
		flags               hop.Flags
	)
	for k, v := range h.All() {
		switch {
		case bytes.EqualFold(k, s.apiKeyHeader):
			if apiKeys == 0 {
				apiKey = v
			}
			apiKeys++
		case bytes.EqualFold(k, s.requestIDHeader):
			if requestIDs == 0 {
				reqID = v
			}
			requestIDs++
		default:
			flags |= hop.Classify(k)
		}
	}
	x.apiKey, x.apiKeys, x.requestIDs, x.headers = apiKey, apiKeys, requestIDs, flags
	return reqID
}

// compileTrusted parses server.trusted_proxies.
func compileTrusted(list []string) (hop.Trusted, error) {
	out := make(hop.Trusted, 0, len(list))
	for _, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
