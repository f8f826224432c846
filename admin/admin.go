package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
)

// MaxBody is the largest request body the admin listener accepts, in bytes.
// Larger bodies get 400 with error "body: larger than 65536 bytes".
const MaxBody = 64 << 10

// maxRead is the most the admin listener reads of a body.
const maxRead = 1 << 20

// Server is the control-plane listener: the check API, the rules and tenants
// APIs, state, health, readiness and metrics. It is a fasthttp.Server of its
// own, so the proxy listener never serves admin paths.
type Server struct {
	deps   Deps
	cfg    Config
	token  []byte               // nil: no token required
	cert   *tlsconf.Certificate // nil: clear text
	server *fasthttp.Server
	res    *reservations // the check API's open reservations
	stop   chan struct{} // closed by Shutdown: ends res's expiry
	once   sync.Once
}

// New checks deps, fills the defaults of deps.Config, validates it and
// builds the admin server. It refuses a listener on a non-loopback address
// without a token.
func New(deps Deps) (*Server, error) {
	switch {
	case deps.Limiter == nil:
		return nil, errors.New("admin: New needs a limiter")
	case deps.Catalog == nil:
		return nil, errors.New("admin: New needs a catalog")
	case deps.Writer == nil:
		return nil, errors.New("admin: New needs a catalog writer")
	}
	cfg := deps.Config
	s := &Server{deps: deps, cfg: cfg}
	if cfg.Token != "" {
		s.token = []byte(cfg.Token)
	}
	if cfg.TLS.Enabled() {
		var err error
		if s.cert, err = tlsconf.Load(cfg.TLS); err != nil {
			return nil, fmt.Errorf("server.admin_tls: %w", err)
		}
	}
	s.server = s.newFastServer()
	s.res, s.stop = newReservations(deps.Limiter.Settle, time.Now), make(chan struct{})
	go s.res.run(s.stop)
	return s, nil
}

// newFastServer is the fasthttp server of the admin listener. Its timeouts
// are the listener's (Serve): fasthttp's own would set socket deadlines on
// every request.
func (s *Server) newFastServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:      s.handle,
		ErrorHandler: s.handleError,
		Name:         "sentinel-admin",
		// Bodies up to MaxBody are accepted; larger ones up to maxRead are
		// read whole and answered 400 by the handler (a server that refuses
		// before reading resets a client still writing, which then sees no
		// answer at all).
		MaxRequestBodySize:    maxRead,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		CloseOnShutdown:       true,
	}
}

// Serve serves the admin API on ln until Shutdown, terminating TLS on it
// when server.admin_tls is set.
func (s *Server) Serve(ln net.Listener) error {
	if s.cert != nil {
		ln = tls.NewListener(ln, s.cert.ServerConfig("http/1.1"))
	}
	return s.server.Serve(deadline.Listen(ln, "admin", deadline.Timeouts{Read: s.cfg.ReadTimeout, Write: s.cfg.WriteTimeout, Idle: s.cfg.IdleTimeout}))
}

// ListenAndServe listens on server.admin_listen and serves until Shutdown.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on server.admin_listen %q: %w", s.cfg.Listen, err)
	}
	return s.Serve(ln)
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends; then it closes the remaining connections.
// Reservations still open stay unsettled: the store counted their
// estimates, which stand.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.stop) })
	return s.server.ShutdownWithContext(ctx)
}
