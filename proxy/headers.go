package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Header hygiene, ported from net/http/httputil.ReverseProxy to fasthttp
// (which strips nothing by itself).

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1, the list the
// standard library's reverse proxy removes in both directions.
var hopHeaders = [][]byte{
	[]byte("Connection"),
	[]byte("Proxy-Connection"), // non-standard, sent by old user agents
	[]byte("Keep-Alive"),
	[]byte("Proxy-Authenticate"),
	[]byte("Proxy-Authorization"),
	[]byte("Te"),
	[]byte("Trailer"),
	[]byte("Transfer-Encoding"),
	[]byte("Upgrade"),
}

// headerFlags is what identify's one pass over the request headers found
// that later steps must act on; a step whose flag is clear has nothing to
// remove and skips its own passes.
type headerFlags uint8

const (
	hdrHop        headerFlags = 1 << iota // a hop-by-hop header (Connection included)
	hdrForwarding                         // Forwarded, X-Forwarded-* or a client IP header
	hdrUnderscore                         // a name with an underscore
)

// classifyHeader is the flags of one request header name.
func classifyHeader(k []byte) headerFlags {
	var f headerFlags
	if bytes.IndexByte(k, '_') >= 0 {
		f |= hdrUnderscore
	}
	switch {
	case isHop(k):
		f |= hdrHop
	case isForwardedKey(k) || bytes.EqualFold(k, hdrForwarded) || inFold(clientIPHeaders, k):
		f |= hdrForwarding
	}
	return f
}

func isHop(k []byte) bool { return inFold(hopHeaders, k) }

// inFold tells whether k is one of names, ignoring case.
func inFold(names [][]byte, k []byte) bool {
	for _, n := range names {
		if len(n) == len(k) && bytes.EqualFold(n, k) {
			return true
		}
	}
	return false
}

// cleanRequest removes from an outbound request header what identify's
// scan (flags) found: the hop-by-hop headers, and, from an untrusted peer,
// the forwarding headers. Most requests have neither, and cost no pass.
func cleanRequest(h *fasthttp.RequestHeader, flags headerFlags, trusted bool) {
	if flags&hdrHop != 0 {
		stripHopRequest(h)
	} else {
		h.ResetConnectionClose()
	}
	if !trusted && flags&hdrForwarding != 0 {
		stripForwarded(h)
	}
}

var (
	hdrConnection      = []byte("Connection")
	hdrForwarded       = []byte("Forwarded")
	hdrXForwardedFor   = []byte("X-Forwarded-For")
	hdrXForwardedProto = []byte("X-Forwarded-Proto")
	hdrXForwardedHost  = []byte("X-Forwarded-Host")
	xForwardedPrefix   = []byte("x-forwarded-")
	strHTTP            = []byte("http")
	strHTTPS           = []byte("https")
	strCommaSpace      = []byte(", ")
)

// maxConnectionTokens bounds the Connection header value copied for parsing;
// a longer value is cut (its remaining tokens are left alone).
const maxConnectionTokens = 512

// stripHopRequest removes the hop-by-hop headers and every header named in
// Connection from an outbound request header, and clears its connection-close
// flag so that the upstream connection stays pooled.
func stripHopRequest(h *fasthttp.RequestHeader) {
	var buf [maxConnectionTokens]byte
	conn := append(buf[:0], h.PeekBytes(hdrConnection)...)
	for len(conn) > 0 {
		var tok []byte
		if tok, conn = nextToken(conn); len(tok) > 0 {
			h.DelBytes(tok)
		}
	}
	for _, k := range hopHeaders {
		h.DelBytes(k)
	}
	h.ResetConnectionClose()
}

// stripHopResponse does the same for a response header coming back from the
// upstream. The client connection's own keep-alive is decided by the server
// from the client's request, not by the upstream's Connection header.
//
// It repeats stripHopRequest's body for the other header type on purpose: a
// generic version over both (their methods through a type parameter) makes
// the stack buffer escape to the heap, which TestRequestPathAllocatesNothing
// refuses.
//
// One pass finds whether there is anything to remove; most answers have
// nothing and skip the deletes.
func stripHopResponse(h *fasthttp.ResponseHeader) {
	hop := false
	for k := range h.All() {
		if isHop(k) {
			hop = true
			break
		}
	}
	if !hop {
		h.ResetConnectionClose()
		return
	}
	var buf [maxConnectionTokens]byte
	conn := append(buf[:0], h.PeekBytes(hdrConnection)...)
	for len(conn) > 0 {
		var tok []byte
		if tok, conn = nextToken(conn); len(tok) > 0 {
			h.DelBytes(tok)
		}
	}
	for _, k := range hopHeaders {
		h.DelBytes(k)
	}
	h.ResetConnectionClose()
}

// nextToken splits the first comma-separated token, trimmed, off v
// ("keep-alive, X-Foo"). It is a plain function rather than an iterator
// with a callback so that the caller's stack buffer does not escape.
func nextToken(v []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return bytes.TrimSpace(v[:i]), v[i+1:]
	}
	return bytes.TrimSpace(v), nil
}

// clientIPHeaders are the headers other proxies and CDNs use to pass the
// client's address on; like Forwarded and X-Forwarded-*, they are removed
// from an untrusted peer's request, whose backend might believe them.
var clientIPHeaders = [][]byte{
	[]byte("X-Real-IP"),
	[]byte("True-Client-IP"),
	[]byte("CF-Connecting-IP"),
	[]byte("X-Client-IP"),
}

// stripForwarded removes Forwarded, every X-Forwarded-* header and the
// clientIPHeaders, which an untrusted client may have made up.
func stripForwarded(h *fasthttp.RequestHeader) {
	h.DelBytes(hdrForwarded)
	for _, k := range clientIPHeaders {
		h.DelBytes(k)
	}
	for {
		var key [64]byte
		k := findHeader(h, key[:0], isForwardedKey)
		if k == nil {
			return
		}
		h.DelBytes(k)
	}
}

func isForwardedKey(k []byte) bool {
	return len(k) >= len(xForwardedPrefix) && bytes.EqualFold(k[:len(xForwardedPrefix)], xForwardedPrefix)
}

// findHeader copies the name of the first header that match accepts into
// dst, or returns nil when there is none. Names longer than dst's capacity
// are copied into a larger (allocated) buffer: rare, and only for hostile
// input. (The name is copied because deleting a header while iterating
// would move the others.)
func findHeader(h *fasthttp.RequestHeader, dst []byte, match func(k []byte) bool) []byte {
	for k := range h.All() {
		if match(k) {
			return append(dst, k...)
		}
	}
	return nil
}

// setForwarded sets X-Forwarded-For, -Proto and -Host on the outbound request
// header h. peerIP is the direct peer's address in text. When the peer is a
// trusted proxy, its X-Forwarded-For chain is extended and its -Proto and
// -Host are kept; otherwise all three describe this hop only (stripForwarded
// has removed the client's).
func setForwarded(h *fasthttp.RequestHeader, peerIP []byte, trusted, tls bool, scratch []byte) []byte {
	xff := scratch[:0]
	if trusted {
		if prior := h.PeekCanonical(hdrXForwardedFor); len(prior) > 0 {
			xff = append(append(xff, prior...), strCommaSpace...)
		}
	}
	xff = append(xff, peerIP...)
	h.SetCanonical(hdrXForwardedFor, xff)
	if !trusted || len(h.PeekCanonical(hdrXForwardedProto)) == 0 {
		proto := strHTTP
		if tls {
			proto = strHTTPS
		}
		h.SetCanonical(hdrXForwardedProto, proto)
	}
	if !trusted || len(h.PeekCanonical(hdrXForwardedHost)) == 0 {
		if host := h.Host(); len(host) > 0 {
			h.SetCanonical(hdrXForwardedHost, host)
		}
	}
	return xff
}
