package hop

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

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

func isHop(k []byte) bool { return inFold(hopHeaders, k) }

var hdrConnection = []byte("Connection")

// maxConnectionTokens bounds the Connection header value copied for parsing;
// a longer value is cut (its remaining tokens are left alone).
const maxConnectionTokens = 512

// StripRequest removes the hop-by-hop headers and every header named in
// Connection from an outbound request header, and clears its connection-close
// flag so that the upstream connection stays pooled.
func StripRequest(h *fasthttp.RequestHeader) {
	var buf [maxConnectionTokens]byte
	conn := append(buf[:0], h.PeekBytes(hdrConnection)...)
	for len(conn) > 0 {
		var tok []byte
		if tok, conn = NextToken(conn); len(tok) > 0 {
			h.DelBytes(tok)
		}
	}
	for _, k := range hopHeaders {
		h.DelBytes(k)
	}
	h.ResetConnectionClose()
}

// StripResponse does the same for a response header coming back from the
// upstream. The client connection's own keep-alive is decided by the server
// from the client's request, not by the upstream's Connection header.
//
// It repeats StripRequest's body for the other header type on purpose: a
// generic version over both (their methods through a type parameter) makes
// the stack buffer escape to the heap, which the proxy's
// TestRequestPathAllocatesNothing refuses.
//
// One pass finds whether there is anything to remove; most answers have
// nothing and skip the deletes.
func StripResponse(h *fasthttp.ResponseHeader) {
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
		if tok, conn = NextToken(conn); len(tok) > 0 {
			h.DelBytes(tok)
		}
	}
	for _, k := range hopHeaders {
		h.DelBytes(k)
	}
	h.ResetConnectionClose()
}

// NextToken splits the first comma-separated token, trimmed, off v
// ("keep-alive, X-Foo"). It is a plain function rather than an iterator
// with a callback so that the caller's stack buffer does not escape.
func NextToken(v []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return bytes.TrimSpace(v[:i]), v[i+1:]
	}
	return bytes.TrimSpace(v), nil
}
