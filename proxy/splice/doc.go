// Package splice carries the bytes of upgraded connections (WebSocket)
// once the proxy has answered their handshake with a 101: each client
// connection is spliced to its upstream connection both ways until either
// side closes or neither sends anything for the route's idle timeout.
//
// A Set tracks the spliced pairs, since fasthttp forgets a connection once
// it is hijacked: the proxy's Shutdown closes them through it. The pairs
// are counted in sentinel_proxy_websocket_open, and each close by who ended
// it in sentinel_proxy_websocket_closed_total{by}.
package splice
