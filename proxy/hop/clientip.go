package hop

import (
	"bytes"
	"net/netip"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// Trusted is the set of trusted proxies (server.trusted_proxies): the peers
// whose X-Forwarded-For and other forwarding headers are believed.
type Trusted []netip.Prefix

// Contains reports whether a is a trusted proxy. The list is short and
// scanned linearly.
func (ts Trusted) Contains(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	for _, p := range ts {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// maxXFFHops is how many X-Forwarded-For entries are remembered, the
// rightmost ones; a longer chain's left part cannot matter unless every
// remembered hop is trusted, and then the leftmost remembered one is used.
const maxXFFHops = 16

// xffChain collects the addresses of X-Forwarded-For values, left to right,
// keeping the last maxXFFHops. Unparsable entries are kept as invalid
// addresses so that the walk from the right stops at them.
type xffChain struct {
	hops [maxXFFHops]netip.Addr
	n    int // entries seen; hops holds the last min(n, maxXFFHops)
}

func (c *xffChain) add(value []byte) {
	for len(value) > 0 {
		var e []byte
		if i := bytes.IndexByte(value, ','); i >= 0 {
			e, value = value[:i], value[i+1:]
		} else {
			e, value = value, nil
		}
		e = bytes.TrimSpace(e)
		if len(e) == 0 {
			continue
		}
		c.hops[c.n%maxXFFHops] = parseHop(e)
		c.n++
	}
}

// ClientIP is the client behind peer, a trusted proxy: the rightmost
// address of every X-Forwarded-For line of h, in order, that trusted does
// not contain (see xffChain.clientIP). It allocates nothing.
func ClientIP(h *fasthttp.RequestHeader, peer netip.Addr, trusted Trusted) netip.Addr {
	var c xffChain
	for k, v := range h.All() {
		if bytes.EqualFold(k, hdrXForwardedFor) {
			c.add(v)
		}
	}
	return c.clientIP(peer, trusted)
}

// clientIP walks the chain from the right, skipping trusted proxies, and
// returns the first address that is not trusted. peer is the direct peer,
// already known to be trusted. An unparsable entry stops the walk: the
// nearest trusted hop to its right is then the best that can be believed.
// When every hop is trusted, the leftmost remembered one is the client.
func (c *xffChain) clientIP(peer netip.Addr, trusted Trusted) netip.Addr {
	kept := min(c.n, maxXFFHops)
	best := peer
	for i := 1; i <= kept; i++ {
		a := c.hops[(c.n-i)%maxXFFHops]
		if !a.IsValid() {
			return best
		}
		if !trusted.Contains(a) {
			return a
		}
		best = a
	}
	return best
}

// parseHop reads one X-Forwarded-For entry: an IP, an IP:port, or [IPv6]:port.
// It returns the zero Addr when the entry is none of these.
func parseHop(e []byte) netip.Addr {
	if len(e) > 0 && e[0] == '[' {
		i := bytes.IndexByte(e, ']')
		if i < 0 {
			return netip.Addr{}
		}
		e = e[1:i]
	} else if i := bytes.IndexByte(e, ':'); i >= 0 && bytes.IndexByte(e[i+1:], ':') < 0 {
		e = e[:i] // v4:port; a v6 address has more than one colon
	}
	if len(e) == 0 || len(e) > 64 {
		return netip.Addr{}
	}
	// The string lives only for this call; ParseAddr copies zones.
	a, err := netip.ParseAddr(unsafe.String(&e[0], len(e)))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
