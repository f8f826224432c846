package proxy

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// maxRequestIDLen bounds an X-Request-Id taken from the client; a longer or
// non-printable one is replaced by a generated ID.
const maxRequestIDLen = 128

// Identity is who sent a request and where it goes, computed once per request
// by identify without allocating. Byte slices point into the request or into
// the Identity's own buffers: valid only until the handler returns.
type Identity struct {
	// IP is the client's address: the socket peer, or, when the peer is a
	// trusted proxy, the rightmost untrusted X-Forwarded-For entry.
	IP netip.Addr
	// IPText is IP in text form, as limit keys use it.
	IPText []byte
	// Peer is the socket peer's address; PeerTrusted says it is in
	// server.trusted_proxies.
	Peer        netip.Addr
	PeerTrusted bool
	// APIKey is the identity.api_key_header value ("" when absent). It is
	// passed to the limiter only when it names a known tenant.
	APIKey []byte
	// Tenant and Plan come from the API key; anonymous requests have Tenant
	// "" and Plan limit.PlanFree.
	Tenant    string
	Plan      string
	Anonymous bool
	// RequestID is the client's X-Request-Id, or a generated one.
	// RequestIDTrusted is set only when the client's ID came through a trusted
	// proxy and identity.trust_request_id is proxies: only then may the
	// limiter use it to spare a retry (the gateway's own IDs are unique, so
	// they are not passed to it).
	RequestID        []byte
	RequestIDTrusted bool
	// Route is the matched route; Resource and Heavy are its settings.
	Route    *Route
	Resource string
	Heavy    bool

	// What scanHeaders found: how often the API key and request ID headers
	// occur, and which headers checkHeaders and outbound must remove.
	apiKeys, requestIDs int
	headers             headerFlags

	// outcome is the decision as the access log names it, scope the limit
	// that refused, upstreamLatency the forward's duration (0: none).
	outcome         string
	scope           limit.Scope
	upstreamLatency time.Duration
	answeredAt      time.Time // when the upstream answered (zero: not forwarded)

	ipBuf   [64]byte
	peerBuf [64]byte
	idBuf   [maxRequestIDLen]byte
	// Per-request scratch kept with the pooled Identity so that the request
	// path allocates nothing: the limiter's request, the X-Forwarded-For
	// value, answer bodies and cache keys.
	limitReq limit.Request
	body     clientBody
	bodyBuf  []byte // the buffered head of a request body (server.request_buffer)
	scratch  []byte
	keyBuf   []byte
	uriBuf   []byte // the normalised path and the query: the forwarded URI
}

// idGen makes request IDs "<8 hex pod prefix>-<16 hex counter>" into a fixed
// array: unique per process start (random prefix), cheap, allocation-free.
type idGen struct {
	prefix [8]byte
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var g idGen
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand doc)
	hex.Encode(g.prefix[:], b[:])
	return &g
}

// appendID appends the next ID to dst.
func (g *idGen) appendID(dst []byte) []byte {
	n := g.n.Add(1)
	dst = append(dst, g.prefix[:]...)
	dst = append(dst, '-')
	var buf [16]byte
	h := strconv.AppendUint(buf[:0], n, 16)
	for i := len(h); i < 16; i++ {
		dst = append(dst, '0')
	}
	return append(dst, h...)
}

// identify fills id for the request in ctx, matched to r (nil: no route).
func (s *Server) identify(ctx *fasthttp.RequestCtx, r *route, id *Identity) {
	h := &ctx.Request.Header
	id.Peer = peerAddr(ctx.RemoteAddr())
	id.PeerTrusted = s.trusted.contains(id.Peer)
	id.IP = id.Peer
	if id.PeerTrusted {
		id.IP = s.forwardedClient(h, id.Peer)
	}
	id.IPText = id.IP.AppendTo(id.ipBuf[:0])

	id.Route, id.Resource, id.Heavy = nil, "", false
	if r != nil {
		id.Route, id.Resource, id.Heavy = &r.Route, r.Resource, r.Heavy
	}
	id.Tenant, id.Plan, id.Anonymous = "", limit.PlanFree, true
	reqID := s.scanHeaders(h, id)
	if len(id.APIKey) > 0 && s.tenants != nil {
		if t, ok := s.tenants.LookupAPIKey(id.APIKey); ok && t != nil {
			id.Tenant, id.Plan, id.Anonymous = t.ID, t.Plan, false
		}
	}

	id.RequestID, id.RequestIDTrusted = id.idBuf[:0], false
	if validRequestID(reqID) {
		id.RequestID = append(id.RequestID, reqID...)
		id.RequestIDTrusted = id.PeerTrusted && s.trustProxyIDs
	} else {
		id.RequestID = s.ids.appendID(id.RequestID)
	}
}

// scanHeaders is the one pass over the request headers: it sets id's API
// key (the first), the counts of the API key and request ID headers and
// the flags of what needs removing, and returns the first request ID.
func (s *Server) scanHeaders(h *fasthttp.RequestHeader, id *Identity) (reqID []byte) {
	id.APIKey, id.apiKeys, id.requestIDs, id.headers = nil, 0, 0, 0
	for k, v := range h.All() {
		switch {
		case bytes.EqualFold(k, s.apiKeyHeader):
			if id.apiKeys == 0 {
				id.APIKey = v
			}
			id.apiKeys++
		case bytes.EqualFold(k, s.requestIDHeader):
			if id.requestIDs == 0 {
				reqID = v
			}
			id.requestIDs++
		default:
			id.headers |= classifyHeader(k)
		}
	}
	return reqID
}

// forwardedClient finds the client behind a trusted peer from every
// X-Forwarded-For header line, in order.
func (s *Server) forwardedClient(h *fasthttp.RequestHeader, peer netip.Addr) netip.Addr {
	var chain xffChain
	for k, v := range h.All() {
		if bytes.EqualFold(k, hdrXForwardedFor) {
			chain.add(v)
		}
	}
	return chain.clientIP(peer, s.trusted)
}

func validRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestIDLen {
		return false
	}
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
