package hop

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

var (
	hdrForwarded       = []byte("Forwarded")
	hdrXForwardedFor   = []byte("X-Forwarded-For")
	hdrXForwardedProto = []byte("X-Forwarded-Proto")
	hdrXForwardedHost  = []byte("X-Forwarded-Host")
	xForwardedPrefix   = []byte("x-forwarded-")
	strHTTP            = []byte("http")
	strHTTPS           = []byte("https")
	strCommaSpace      = []byte(", ")
)

// clientIPHeaders are the headers other proxies and CDNs use to pass the
// client's address on; like Forwarded and X-Forwarded-*, they are removed
// from an untrusted peer's request, whose backend might believe them.
var clientIPHeaders = [][]byte{
	[]byte("X-Real-IP"),
	[]byte("True-Client-IP"),
	[]byte("CF-Connecting-IP"),
	[]byte("X-Client-IP"),
}

// StripForwarded removes Forwarded, every X-Forwarded-* header and the
// clientIPHeaders, which an untrusted client may have made up.
func StripForwarded(h *fasthttp.RequestHeader) {
	h.DelBytes(hdrForwarded)
	for _, k := range clientIPHeaders {
		h.DelBytes(k)
	}
	deleteAll(h, isForwardedKey)
}

func isForwardedKey(k []byte) bool {
	return len(k) >= len(xForwardedPrefix) && bytes.EqualFold(k[:len(xForwardedPrefix)], xForwardedPrefix)
}

// deleteAll deletes every header whose name match accepts, and returns how
// many it deleted.
func deleteAll(h *fasthttp.RequestHeader, match func(k []byte) bool) int {
	n := 0
	for {
		var key [64]byte
		k := findHeader(h, key[:0], match)
		if k == nil {
			return n
		}
		h.DelBytes(k)
		n++
	}
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

// SetForwarded sets X-Forwarded-For, -Proto and -Host on the outbound
// request header h, building X-Forwarded-For in scratch, which it returns
// (grown, for the caller to keep). peerIP is the direct peer's address in
// text. When the peer is a trusted proxy, its X-Forwarded-For chain is
// extended and its -Proto and -Host are kept; otherwise all three describe
// this hop only (StripForwarded has removed the client's).
func SetForwarded(h *fasthttp.RequestHeader, peerIP []byte, trusted, tls bool, scratch []byte) []byte {
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
