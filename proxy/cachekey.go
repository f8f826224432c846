package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
)

// The response cache is shared by every client, so what goes in and who gets
// it out is decided here:
//
//   - the key is the method, the Host (lower case), the forwarded URI
//     (normalised path and query) and the tenant: each tenant has its own
//     partition, and anonymous requests have theirs;
//   - an answer to a request that carries credentials (Authorization,
//     Cookie or the API key header) is stored only when the backend marks
//     it shareable with Cache-Control "public" or "s-maxage" (RFC 9111
//     §3.5); the cache itself refuses "private", "no-store" and any Vary
//     but Accept-Encoding (cache.Cache.Set);
//   - the mode's plan gate runs before the cache, so a cached answer is no
//     way around "PREMIUM only" or "FREE blocked".

var (
	hdrAuthorization = []byte("Authorization")
	hdrCookie        = []byte("Cookie")
	hdrCacheControl  = []byte("Cache-Control")
	strPublic        = []byte("public")
	strSMaxAge       = []byte("s-maxage")
)

// planGate is the mode's refusal of x's plan, or nil.
func planGate(x *exchange, pol adaptive.Policy) *reason {
	switch {
	case pol.PremiumOnly && x.plan != catalog.PlanPremium:
		return reasonPremiumOnly
	case pol.BlockFree && x.plan == catalog.PlanFree:
		return reasonFreeBlocked
	}
	return nil
}

// cacheKey is "METHOD host/uri\x00" followed by "t" and the tenant, or "a"
// for anonymous requests, built in x's buffer.
func (s *Server) cacheKey(ctx *fasthttp.RequestCtx, x *exchange) []byte {
	k := append(x.keyBuf[:0], ctx.Method()...)
	k = append(k, ' ')
	for _, c := range ctx.Request.Header.Host() {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		k = append(k, c)
	}
	k = append(k, ctx.Request.Header.RequestURI()...)
	k = append(k, 0)
	if x.anonymous {
		k = append(k, 'a')
	} else {
		k = append(k, 't')
		k = append(k, x.tenant...)
	}
	x.keyBuf = k
	return k
}

// sharable tells whether the answer resp to req may be stored: always when
// req carries no credentials, otherwise only when resp says it is public.
func (s *Server) sharable(req *fasthttp.RequestHeader, resp *fasthttp.ResponseHeader) bool {
	if len(req.PeekBytes(hdrAuthorization)) == 0 && len(req.PeekBytes(hdrCookie)) == 0 &&
		len(req.PeekBytes(s.apiKeyHeader)) == 0 {
		return true
	}
	cc := resp.PeekBytes(hdrCacheControl)
	return hasDirective(cc, strPublic) || hasDirective(cc, strSMaxAge)
}

// hasDirective tells whether the comma-separated list holds the directive
// name (ignoring case and any "=value").
func hasDirective(list, name []byte) bool {
	for len(list) > 0 {
		var tok []byte
		tok, list = hop.NextToken(list)
		if i := bytes.IndexByte(tok, '='); i >= 0 {
			tok = bytes.TrimSpace(tok[:i])
		}
		if bytes.EqualFold(tok, name) {
			return true
		}
	}
	return false
}
