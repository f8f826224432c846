// Package hop is the proxy's header hygiene at its hop, ported from
// net/http/httputil.ReverseProxy to fasthttp (which strips nothing by
// itself): it removes the hop-by-hop headers both ways (and those named in
// Connection), removes the forwarding headers an untrusted peer may have
// made up and sets the gateway's own, finds the client behind trusted
// proxies from X-Forwarded-For, and classifies header names in the one
// pass the proxy makes over a request's headers.
//
// Everything here runs on the request path and allocates nothing (the
// proxy's TestRequestPathAllocatesNothing); byte slices it is given are not
// kept after a call returns.
package hop
