package proxy

import (
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/proxy/reqid"
	"github.com/sentinel-gateway/sentinel/proxy/upload"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// exchange is the state of one request from its arrival to its answer:
// who sent it and where it goes (inspect), what was decided about it, what
// the forward returned, and the buffers the request path builds in. The
// request path passes it whole instead of a parameter per value.
//
// Exchanges are pooled so that the request path allocates nothing
// (TestRequestPathAllocatesNothing, BenchmarkHandler), and reset only when
// they go back to the pool (releaseExchange): every step writes its fields
// on a zero exchange, so a value can never carry over into another
// client's request. Byte slices point into the request or into the
// exchange's own buffers: valid only until the handler returns.
type exchange struct {
	// start is when the request arrived (fasthttp's reading for it).
	start time.Time
	// ip is the client's address: the socket peer, or, when the peer is a
	// trusted proxy, the rightmost untrusted X-Forwarded-For entry; ipText
	// is ip in text form, as limit keys use it.
	ip     netip.Addr
	ipText []byte
	// peer is the socket peer's address; peerTrusted says it is in
	// server.trusted_proxies.
	peer        netip.Addr
	peerTrusted bool
	// apiKey is the identity.api_key_header value (nil when absent). It is
	// passed to the limiter only when it names a known tenant.
	apiKey []byte
	// tenant and plan come from the API key; anonymous requests have tenant
	// "" and plan limit.PlanFree.
	tenant    string
	plan      string
	anonymous bool
	// requestID is the client's X-Request-Id, or a generated one.
	// requestIDTrusted is set only when the client's ID came through a
	// trusted proxy and identity.trust_request_id is proxies: only then may
	// the limiter use it to spare a retry (the gateway's own IDs are unique,
	// so they are not passed to it).
	requestID        []byte
	requestIDTrusted bool
	// route is the matched route; nil: none matched, or the request was
	// refused before routing.
	route *route

	// What scanHeaders found: how often the API key and request ID headers
	// occur, and which headers checkHeaders and outbound must remove.
	apiKeys, requestIDs int
	headers             hop.Flags

	// cacheable says the answer may be served from or kept in the cache.
	cacheable bool
	// decision is the limiter's; its headers go on the answer.
	decision limit.Decision
	// outcome is the decision as the access log names it ("": refused
	// before a decision).
	outcome string
	// class is the forward's class of answer, upstreamLatency its duration
	// (0: not forwarded) and answeredAt when the upstream answered (zero:
	// not forwarded).
	class           upstream.Class
	upstreamLatency time.Duration
	answeredAt      time.Time

	// Per-request scratch kept with the pooled exchange, so that the request
	// path allocates nothing.
	ipBuf    [64]byte
	peerBuf  [64]byte
	idBuf    [reqid.MaxLen]byte
	limitReq limit.Request // the limiter's request
	attrs    requestAttrs  // limitReq's headers and query
	body     upload.Reader // a streamed request body being forwarded
	bodyBuf  []byte        // the buffered head of a request body (server.request_buffer)
	scratch  []byte        // the X-Forwarded-For value and answer bodies
	keyBuf   []byte        // cache keys
	uriBuf   []byte        // the normalised path and the query: the forwarded URI
}

// acquireExchange takes a zero exchange from the pool.
func (s *Server) acquireExchange() *exchange {
	return s.exchanges.Get().(*exchange)
}

// releaseExchange resets x and puts it back in the pool; x must not be
// used after.
func (s *Server) releaseExchange(x *exchange) {
	x.reset()
	s.exchanges.Put(x)
}

// reset is the one place an exchange is cleared: it zeroes every field
// and keeps only the capacity of the growable buffers. Zeroing the whole
// struct rather than field by field means a field added later is cleared
// without a line of its own (TestExchangeReset checks every field).
func (x *exchange) reset() {
	bodyBuf, scratch, keyBuf, uriBuf := x.bodyBuf[:0], x.scratch[:0], x.keyBuf[:0], x.uriBuf[:0]
	// Assigning the zero value clears x in place; a composite literal
	// holding the buffers would be built in a stack temporary and copied.
	*x = exchange{}
	x.bodyBuf, x.scratch, x.keyBuf, x.uriBuf = bodyBuf, scratch, keyBuf, uriBuf
}

// resource is the matched route's resource; "" when none matched.
func (x *exchange) resource() string {
	if x.route == nil {
		return ""
	}
	return x.route.Resource
}

// requestAttrs reads the headers and query parameters of a request for the
// limiter's policies (limit.Attrs). The exchange holds it, so the pointer
// the limiter gets does not allocate; fasthttp parses the query once per
// request into its reused arguments.
type requestAttrs struct{ r *fasthttp.Request }

// Header returns the first value of the header name (any case).
func (a *requestAttrs) Header(name []byte) []byte { return a.r.Header.PeekBytes(name) }

// Query returns the first value of the query parameter name.
func (a *requestAttrs) Query(name []byte) []byte { return a.r.URI().QueryArgs().PeekBytes(name) }

var _ limit.Attrs = (*requestAttrs)(nil)
