package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// Upgrade pass-through (WebSocket).
//
// On a route with websocket: true, a request with "Connection: upgrade" and
// an Upgrade header is identified, gated and limited like any request (the
// connection counts once, at its handshake); then the gateway dials one of
// the route's upstream targets itself, sends the handshake with Connection
// and Upgrade kept (every other hop-by-hop header is still stripped, and
// the forwarded headers are set as for any request), and reads the answer.
// A 101 goes back to the client and the two connections are spliced both
// ways until either side closes or neither sends anything for
// websocket_idle_timeout. Any other answer goes back as it is, and the
// client connection closes after it.
//
// An upgraded connection takes no upstream concurrency slot (it would hold
// it for its lifetime) and is not an in-flight request once spliced; it is
// counted in sentinel_proxy_websocket_open. Shutdown closes the upgraded
// connections after the server stopped. The splice itself is package
// splice.
//
// On other routes an Upgrade request is forwarded as a plain request with
// Upgrade and Connection stripped, as every hop-by-hop header is.

var (
	hdrConnection = []byte("Connection")
	hdrUpgrade    = []byte("Upgrade")
	strUpgrade    = []byte("Upgrade")
	tokUpgrade    = []byte("upgrade")
	errNoDialer   = errors.New("proxy: the route's upstream cannot open upgraded connections")
)

// WebSocket metrics.
var (
	wsUpgraded = metrics.NewCounter(`sentinel_proxy_websocket_upgrades_total{result="upgraded"}`)
	wsDeclined = metrics.NewCounter(`sentinel_proxy_websocket_upgrades_total{result="declined"}`)
	wsFailed   = metrics.NewCounter(`sentinel_proxy_websocket_upgrades_total{result="failed"}`)
)

// upstreamDialer opens a connection to one of a pool's targets.
// *upstream.Pool implements it; see Pool.Dial.
type upstreamDialer interface {
	Dial(timeout time.Duration) (conn net.Conn, host string, err error)
}

var _ upstreamDialer = (*upstream.Pool)(nil)

// isUpgrade reports whether h asks to upgrade the connection: an Upgrade
// header and the "upgrade" token in Connection.
func isUpgrade(h *fasthttp.RequestHeader) bool {
	if len(h.PeekBytes(hdrUpgrade)) == 0 {
		return false
	}
	conn := h.PeekBytes(hdrConnection)
	for len(conn) > 0 {
		var tok []byte
		tok, conn = hop.NextToken(conn)
		if bytes.EqualFold(tok, tokUpgrade) {
			return true
		}
	}
	return false
}

// upgrade forwards an admitted Upgrade request and, on a 101, splices the
// connections (see the comment at the top of this file).
func (s *Server) upgrade(ctx *fasthttp.RequestCtx, x *exchange) {
	r := x.route
	dialer, ok := r.pool.(upstreamDialer)
	if !ok {
		wsFailed.Inc()
		s.reject(ctx, x, upstreamErrorReason(errNoDialer))
		return
	}
	timeout := r.bodyTimeout
	if timeout <= 0 {
		timeout = s.cfg.Server.WriteTimeout
	}
	up, host, err := dialer.Dial(timeout)
	if err != nil {
		wsFailed.Inc()
		s.reject(ctx, x, upstreamErrorReason(err))
		return
	}
	br, err := s.handshake(ctx, x, up, host, timeout)
	if err != nil {
		up.Close()
		wsFailed.Inc()
		if isTimeout(err) {
			err = upstream.ErrTimeout
		}
		ctx.Response.Reset()
		s.reject(ctx, x, upstreamErrorReason(err))
		return
	}
	resp := &ctx.Response
	if x.decision.Scope != limit.ScopeNone {
		s.limitHeaders.Set(&resp.Header, &x.decision)
	}
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		// Declined (a 400, 401, 426 ...): the answer goes back as it is.
		up.Close()
		wsDeclined.Inc()
		hop.StripResponse(&resp.Header)
		ctx.SetConnectionClose()
		return
	}
	wsUpgraded.Inc()
	keepUpgrade(&resp.Header)
	idle := r.WebSocketIdleTimeout
	ws := &s.upgraded
	slots := s.holdSlots(x) // a concurrency limit's slot lasts as long as the connection
	ctx.Hijack(func(c net.Conn) {
		ws.Splice(c, up, br, idle)
		if slots != nil {
			slots.End(true)
		}
	})
}

// handshake writes the client's request head to the upstream connection,
// with Connection and Upgrade kept, and reads the answer's head into
// ctx.Response; br holds what the upstream sent after it.
func (s *Server) handshake(ctx *fasthttp.RequestCtx, x *exchange, up net.Conn, host string, timeout time.Duration) (*bufio.Reader, error) {
	req := &ctx.Request
	upgradeTo := append([]byte(nil), req.Header.PeekBytes(hdrUpgrade)...)
	req = s.outbound(ctx, x, nil, true) // hop-by-hop stripped, forwarded headers set
	req.Header.SetBytesKV(hdrConnection, strUpgrade)
	req.Header.SetBytesKV(hdrUpgrade, upgradeTo)
	if len(req.Header.Host()) == 0 {
		req.Header.SetHost(host)
	}
	_ = up.SetDeadline(time.Now().Add(timeout))
	bw := bufio.NewWriter(up)
	if _, err := bw.Write(req.Header.Header()); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(up)
	resp := &ctx.Response
	resp.Reset()
	if err := resp.Header.Read(br); err != nil {
		return nil, err
	}
	if resp.StatusCode() != fasthttp.StatusSwitchingProtocols {
		// The answer of a declined upgrade is small: read it whole.
		if err := resp.ReadBody(br, int(s.cfg.Server.MaxRequestBody)); err != nil {
			return nil, err
		}
	}
	_ = up.SetDeadline(time.Time{})
	return br, nil
}

// keepUpgrade strips the hop-by-hop headers of a 101 answer but the two
// that make it one.
func keepUpgrade(h *fasthttp.ResponseHeader) {
	upgradeTo := append([]byte(nil), h.PeekBytes(hdrUpgrade)...)
	hop.StripResponse(h)
	h.SetBytesKV(hdrConnection, strUpgrade)
	h.SetBytesKV(hdrUpgrade, upgradeTo)
}
