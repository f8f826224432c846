package hop

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// Flags is what the proxy's one pass over the request headers found that
// later steps must act on; a step whose flag is clear has nothing to remove
// and skips its own passes.
type Flags uint8

// The flags Classify sets.
const (
	Hop        Flags = 1 << iota // a hop-by-hop header (Connection included)
	Forwarding                   // Forwarded, X-Forwarded-* or a client IP header
	Underscore                   // a name with an underscore
)

// Classify is the flags of one request header name.
func Classify(k []byte) Flags {
	var f Flags
	if bytes.IndexByte(k, '_') >= 0 {
		f |= Underscore
	}
	switch {
	case isHop(k):
		f |= Hop
	// Forwarded, X-Forwarded-* or a client IP header, spelled out here: a
	// helper for the three would cost a call per header, not inlined.
	case isForwardedKey(k) || bytes.EqualFold(k, hdrForwarded) || inFold(clientIPHeaders, k):
		f |= Forwarding
	}
	return f
}

// inFold tells whether k is one of names, ignoring case.
func inFold(names [][]byte, k []byte) bool {
	for _, n := range names {
		if len(n) == len(k) && bytes.EqualFold(n, k) {
			return true
		}
	}
	return false
}

// Clean removes from an outbound request header what the scan (flags)
// found: the hop-by-hop headers, and, from an untrusted peer, the
// forwarding headers. Most requests have neither, and cost no pass.
func Clean(h *fasthttp.RequestHeader, flags Flags, trusted bool) {
	if flags&Hop != 0 {
		StripRequest(h)
	} else {
		h.ResetConnectionClose()
	}
	if !trusted && flags&Forwarding != 0 {
		StripForwarded(h)
	}
}

var strUnderscore = []byte("_")

// DropUnderscores deletes every header whose name has an underscore, and
// returns how many it deleted.
func DropUnderscores(h *fasthttp.RequestHeader) int {
	return deleteAll(h, hasUnderscore)
}

func hasUnderscore(k []byte) bool { return bytes.Contains(k, strUnderscore) }
