package rls

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// Limiter decides descriptors. *limit.Limiter implements it: the proxy's
// limiter, so the gRPC service, the proxy and the check API share one
// budget. Allow must return within the store deadline and be safe for
// concurrent use; rls does not keep req after it returns.
type Limiter interface {
	Allow(ctx context.Context, req *limit.Request) limit.Decision
	// MaxTokens is the most tokens a request like req can ever be granted
	// and the scope of that limit; it must not call the store.
	MaxTokens(req *limit.Request) (int64, limit.Scope)
}

// Catalog gives a tenant's plan. *catalog.Catalog implements it.
type Catalog interface {
	TenantPlan(id string) (string, bool)
}

// Interface guards.
var (
	_ Limiter = (*limit.Limiter)(nil)
	_ Catalog = (*catalog.Catalog)(nil)
)

// Deps are the configuration and the parts the gRPC listener serves.
type Deps struct {
	Config  Config
	Limiter Limiter
	Catalog Catalog
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// maxMessage bounds one request message, in bytes.
const maxMessage = 1 << 20

// streamWorkers is how many goroutines serve calls, each one call after
// another (grpc.NumStreamWorkers).
const streamWorkers = 64

// Server is the gRPC listener: RateLimitService, health and reflection.
type Server struct {
	cfg    Config
	token  []byte
	grpc   *grpc.Server
	health *health.Server
	svc    *service
}

// SetFiles switches to files (nil: none), from LoadFiles, and to
// grpc.descriptor_override; calls in flight finish with what they read.
func (s *Server) SetFiles(files *Files, override bool) {
	s.svc.setFiles(files, override)
}

// FilesChanged reports whether files differ from the ones served (a reload
// that reads the same bytes changes nothing).
func (s *Server) FilesChanged(files *Files) bool {
	return !s.svc.files.Load().same(files)
}

// New loads the TLS certificate when one is set and builds the server of
// deps.Config, a provisioned section (Config.SetDefaults, Config.Validate);
// nothing listens yet.
func New(deps Deps) (*Server, error) {
	if deps.Limiter == nil || deps.Catalog == nil {
		return nil, errors.New("rls: New needs a limiter and a catalog")
	}
	cfg := deps.Config
	s := &Server{cfg: cfg, health: health.NewServer()}
	if cfg.Token != "" {
		s.token = []byte("Bearer " + cfg.Token)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage),
		// Calls run on workers that live on between them: a goroutine
		// started for each call grew its stack anew to the limiter's depth
		// (runtime.morestack was a fifth of the service's CPU on rare keys,
		// make bench-rls). Past streamWorkers calls at once, a call gets a
		// goroutine of its own.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if cfg.TLS.Enabled() {
		cert, err := tlsconf.Load(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cert.ServerConfig("h2"))))
	}
	svc := &service{limiter: deps.Limiter, catalog: deps.Catalog, now: deps.Now}
	if svc.now == nil {
		svc.now = time.Now
	}
	if len(cfg.Domains) > 0 {
		svc.domains = cfg.Domains
	}
	if len(cfg.ConfigFiles) > 0 {
		files, err := LoadFiles(cfg.ConfigFiles)
		if err != nil {
			return nil, err
		}
		svc.setFiles(files, cfg.Overrides())
	}
	s.svc = svc
	s.grpc = grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown marks the services NOT_SERVING, stops accepting, and waits for
// in-flight calls until ctx ends; then it closes the connections and drops
// the files' metrics.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		s.svc.setFiles(nil, false)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}

// healthPrefix is the health service's method prefix: probes need no token.
const healthPrefix = "/grpc.health.v1.Health/"

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// authorize checks the bearer token of the `authorization` metadata, in
// constant time, unless no token is configured or method is the health
// service's.
func (s *Server) authorize(ctx context.Context, method string) error {
	if s.token == nil || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if subtle.ConstantTimeCompare([]byte(v), s.token) == 1 {
			return nil
		}
	}
	callsUnauth.Inc()
	return status.Error(codes.Unauthenticated, "authorization: missing or wrong bearer token (grpc.token)")
}
