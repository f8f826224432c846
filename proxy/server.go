package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
	"github.com/sentinel-gateway/sentinel/proxy/hop"
	"github.com/sentinel-gateway/sentinel/proxy/parseerr"
	"github.com/sentinel-gateway/sentinel/proxy/reqid"
	"github.com/sentinel-gateway/sentinel/proxy/splice"
	"github.com/sentinel-gateway/sentinel/reply"
)

// Server is the proxy listener: every request is identified, routed, passed
// through the adaptive gate and the limiter, and forwarded to its route's
// upstream pool.
type Server struct {
	cfg     Config
	table   atomic.Pointer[Table] // the routes: one load per request
	trusted hop.Trusted

	tenants Tenants
	limiter Limiter
	settler Settler // the limiter, when it settles cost limits
	gate    Gate
	cache   Cache

	tableMu sync.Mutex // serializes SetTable
	noRoute *routeMetrics
	set     *metrics.Set // the route series, unregistered at Shutdown

	apiKeyHeader    []byte
	requestIDHeader []byte
	deadlineHeader  []byte // identity.deadline_header: the client's own deadline, in milliseconds
	ids             *reqid.Gen
	trustProxyIDs   bool            // identity.trust_request_id is proxies
	limitHeaders    reply.HeaderSet // server.rate_limit_headers
	exchanges       sync.Pool       // *exchange
	errLog          *parseerr.Log
	access          *accessLog // nil: log.access is off

	cert     *tlsconf.Certificate // nil: clear text
	upgraded splice.Set           // spliced WebSocket connections
	server   *fasthttp.Server

	// draining is set from Drain: every answer closes its connection.
	draining atomic.Bool
	// listener is Serve's, for Shutdown to close idle connections.
	listener atomic.Pointer[deadline.Listener]
}

// drainIdle is how long a kept-alive connection must have waited for its
// next request before a shutting-down server closes it. A connection in
// use gets its next answer with Connection: close and is closed by its
// client, which is safe; closing one as its client sends on it loses the
// request (a client sends a POST again only when it knows nothing was
// written), so only connections their clients have left idle are closed.
const drainIdle = time.Second

// New builds the proxy server from deps; deps.Config is a provisioned
// section (Config.SetDefaults, Config.Validate). Every route's upstream
// must resolve to a pool.
func New(deps Deps) (*Server, error) {
	cfg := deps.Config
	trusted, err := compileTrusted(cfg.Server.TrustedProxies)
	if err != nil {
		return nil, err
	}
	if deps.Upstreams == nil && deps.Pools == nil {
		return nil, errors.New("proxy: New needs the upstream pools")
	}
	s := &Server{
		cfg:             cfg,
		trusted:         trusted,
		tenants:         deps.Tenants,
		limiter:         deps.Limiter,
		gate:            deps.Adaptive,
		cache:           deps.Cache,
		set:             metrics.NewSet(),
		apiKeyHeader:    []byte(cfg.Identity.APIKeyHeader),
		requestIDHeader: fasthttp.AppendNormalizedHeaderKey(nil, cfg.Identity.RequestIDHeader), // for SetCanonical
		deadlineHeader:  []byte(cfg.Identity.DeadlineHeader),
		ids:             reqid.NewGen(),
		trustProxyIDs:   cfg.Identity.TrustsProxyRequestID(),
		limitHeaders:    cfg.Server.RateLimitHeaders.set(),
	}
	s.exchanges.New = func() any { return new(exchange) }
	s.settler, _ = deps.Limiter.(Settler)
	t, err := s.NewTable(cfg.Routes, Bindings{Upstreams: deps.Upstreams, Limits: deps.limits(), Pools: deps.Pools})
	if err != nil {
		return nil, err
	}
	s.noRoute = newRouteMetrics(s.set, "none")
	s.SetTable(t)
	metrics.RegisterSet(s.set)
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	s.errLog = parseerr.NewLog(log, cfg.Server.ParseErrorLogRate)
	if deps.AccessLog != nil {
		s.access = newAccessLog(deps.AccessLog, deps.AccessRefusals)
	}
	if cfg.Server.TLS.Enabled() {
		if s.cert, err = tlsconf.Load(cfg.Server.TLS); err != nil {
			return nil, fmt.Errorf("server.tls: %w", err)
		}
	}
	s.server = s.newFastServer()
	return s, nil
}

// newFastServer is the fasthttp server of the proxy listener. Request
// bodies stream (the handler enforces max_request_body on them); a body
// declared larger is refused at once (bodyLimit).
// read_timeout, write_timeout and idle_timeout are the listener's (Serve):
// fasthttp's own would set socket deadlines on every request.
func (s *Server) newFastServer() *fasthttp.Server {
	srv := s.cfg.Server
	return &fasthttp.Server{
		Handler:                       s.handle,
		ErrorHandler:                  s.handleError,
		HeaderReceived:                s.bodyLimit,
		Logger:                        s.errLog,
		Name:                          "sentinel",
		Concurrency:                   srv.Concurrency,
		MaxRequestBodySize:            int(srv.MaxRequestBody),
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		ReduceMemoryUsage:             false,
	}
}

// bodyLimit is fasthttp's read limit of a request's body, called with its
// head. Before the handler runs, fasthttp reads a streamed body's first
// bytes (up to 8 KiB), and waits for them: a body declared larger than
// server.max_request_body and sent slowly would otherwise be answered 408
// when the read timeout ends. Its limit is made 1 byte, so that fasthttp
// waits for one byte only and the handler refuses it with 413 on its
// declared Content-Length; other requests keep the server's limit.
func (s *Server) bodyLimit(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if cl := h.ContentLength(); cl > 0 && int64(cl) > int64(s.cfg.Server.MaxRequestBody) {
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
}

// Serve serves the proxy on ln until Shutdown, terminating TLS on it when
// server.tls is set (HTTP/1.1 only: ALPN offers http/1.1 alone); without
// TLS, a client that opens with a TLS handshake is refused.
func (s *Server) Serve(ln net.Listener) error {
	if s.cert != nil {
		ln = tls.NewListener(ln, s.cert.ServerConfig("http/1.1"))
	} else {
		ln = parseerr.Sniff(ln)
	}
	srv := s.cfg.Server
	dl := deadline.Listen(ln, "proxy", deadline.Timeouts{Read: srv.ReadTimeout, Write: srv.WriteTimeout, Idle: srv.IdleTimeout})
	if l, ok := dl.(*deadline.Listener); ok {
		s.listener.Store(l)
	}
	return s.server.Serve(dl)
}

// Drain makes every answer from now on carry Connection: close, so that
// clients move their next requests to new connections (which a balancer
// that saw readiness fail sends elsewhere) rather than to connections this
// server will close. Each such answer is counted in
// sentinel_proxy_drain_answers_total.
func (s *Server) Drain() {
	s.draining.Store(true)
}

// Shutdown drains (Drain), stops accepting connections, then, until no
// request is in flight or ctx ends, closes the kept-alive connections left
// idle for drainIdle while the others end with their answers; then it
// waits for what is left until ctx ends and closes the remaining
// connections.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	if l := s.listener.Load(); l != nil {
		_ = l.Close() // Serve returns; its connections are served on
		s.closeIdle(ctx, l)
	}
	err := s.server.ShutdownWithContext(ctx)
	s.upgraded.CloseAll()
	metrics.UnregisterSet(s.set, true)
	return err
}

// closeIdle closes l's connections as they have been idle for drainIdle,
// until none is left open or ctx ends.
func (s *Server) closeIdle(ctx context.Context, l *deadline.Listener) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for l.Serving() > 0 {
		l.CloseIdle(drainIdle)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handleError answers the requests fasthttp could not read: 431 or 414 for
// a head over the read buffer, 413 for a body over server.max_request_body,
// 408 for a read timeout, 400 otherwise; the connection ends with the
// answer.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	var id [reqid.MaxLen]byte
	if status, msg := parseerr.Answer(err); status != 0 {
		clientFaultMalformed.Inc()
		s.writeProblem(ctx, status, msg, s.ids.Append(id[:0]))
		ctx.SetConnectionClose()
		return
	}
	why := reasonMalformed
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		why = reasonBodyTooLarge
	case isTimeout(err):
		why = reasonHeadTimeout
	}
	why.counter.Inc()
	s.writeProblem(ctx, why.status, why.msg, s.ids.Append(id[:0]))
	ctx.SetConnectionClose()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
