package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// MaxAdminBody is the largest request body the admin listener accepts, in
// bytes. Larger bodies get 400 with error "body: larger than 65536 bytes".
const MaxAdminBody = 64 << 10

// maxAdminRead is the most the admin listener reads of a body.
const maxAdminRead = 1 << 20

// adminChecker decides one request. *limit.Limiter implements it; the check
// API calls the same limiter as the proxy, so both count against one budget.
// Allow must be safe for concurrent use and return within the store deadline.
type adminChecker interface {
	Allow(ctx context.Context, req *limit.Request) limit.Decision
}

// AdminCatalog is what the admin API reads: the current rules and tenants.
// *limit.Catalog implements it. Every method reads one immutable snapshot and
// is safe for concurrent use.
type AdminCatalog interface {
	Rules() []limit.Rule
	Rule(tenant, resource string) (limit.Rule, bool)
	Tenants() []limit.Tenant
	Tenant(id string) (limit.Tenant, bool)
}

// CatalogWriter changes rules and tenants. Two implementations exist: with
// Redis, *limit.CatalogSync writes through to Redis and every pod applies the
// change within a second; without Redis, the catalog itself (wrapped by
// MemoryCatalogWriter) changes the process's rules. Put and Delete return a
// *limit.ValidationError for a bad rule or tenant (the API answers 400 with its
// field) and any other error for a store failure (the API answers 503).
type CatalogWriter interface {
	PutRule(ctx context.Context, r limit.Rule) error
	DeleteRule(ctx context.Context, tenant, resource string) error
	PutTenant(ctx context.Context, t limit.Tenant) error
	DeleteTenant(ctx context.Context, id string) error
}

// StateFunc returns the JSON-ready state shown by GET /v1/state, such as
// adaptive.Controller.State. It is called once per request.
type StateFunc func() any

// ReadyFunc says whether the pod may take traffic and why (readyz). It must
// return quickly: it is called with a context bounded to one second.
type ReadyFunc func(ctx context.Context) (ready bool, reason string)

// AdminDeps are the parts the admin listener serves.
type AdminDeps struct {
	// Config holds admin_listen, admin_token, metrics_require_token and the
	// timeouts. Admin does not change it.
	Config ServerConfig
	// Limiter answers the check API (required).
	Limiter adminChecker
	// Catalog is read by the rules, tenants and check APIs (required).
	Catalog AdminCatalog
	// Writer changes rules and tenants (required).
	Writer CatalogWriter
	// State is shown by GET /v1/state (nil: an empty object).
	State StateFunc
	// Ready decides GET /readyz (nil: always ready).
	Ready ReadyFunc
	// Status is added to GET /v1/state under "limiter", for example the
	// store's name and breaker state (nil: omitted).
	Status StateFunc
}

// Admin is the control-plane listener: the check API, the rules and tenants
// APIs, state, health, readiness and metrics. It is a second fasthttp.Server,
// separate from the proxy's, so the proxy listener never serves admin paths.
type Admin struct {
	deps   AdminDeps
	token  []byte // nil: no token required
	server *fasthttp.Server
}

// NewAdmin checks deps and builds the admin server. It refuses an admin
// listener on a non-loopback address without admin_token.
func NewAdmin(deps AdminDeps) (*Admin, error) {
	switch {
	case deps.Limiter == nil:
		return nil, errors.New("proxy: admin needs a limiter")
	case deps.Catalog == nil:
		return nil, errors.New("proxy: admin needs a catalog")
	case deps.Writer == nil:
		return nil, errors.New("proxy: admin needs a catalog writer")
	}
	cfg := deps.Config
	if cfg.AdminToken == "" && !isLoopback(cfg.AdminListen) {
		return nil, fmt.Errorf("server.admin_listen: %q is not a loopback address and server.admin_token is empty; "+
			"bind it to 127.0.0.1 or set a token", cfg.AdminListen)
	}
	a := &Admin{deps: deps}
	if cfg.AdminToken != "" {
		a.token = []byte(cfg.AdminToken)
	}
	a.server = &fasthttp.Server{
		Handler:      a.handle,
		ErrorHandler: a.handleError,
		Name:         "sentinel-admin",
		// Bodies up to MaxAdminBody are accepted; larger ones up to
		// maxAdminRead are read whole and answered 400 by the handler (a
		// server that refuses before reading resets a client still
		// writing, which then sees no answer at all).
		MaxRequestBodySize:    maxAdminRead,
		ReadTimeout:           orDefault(cfg.ReadTimeout, 5*time.Second),
		WriteTimeout:          orDefault(cfg.WriteTimeout, 30*time.Second),
		IdleTimeout:           orDefault(cfg.IdleTimeout, 60*time.Second),
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		CloseOnShutdown:       true,
	}
	return a, nil
}

// Serve serves the admin API on ln until Shutdown.
func (a *Admin) Serve(ln net.Listener) error {
	return a.server.Serve(ln)
}

// ListenAndServe listens on server.admin_listen and serves until Shutdown.
func (a *Admin) ListenAndServe() error {
	ln, err := net.Listen("tcp", a.deps.Config.AdminListen)
	if err != nil {
		return fmt.Errorf("cannot listen on server.admin_listen %q: %w", a.deps.Config.AdminListen, err)
	}
	return a.Serve(ln)
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends.
func (a *Admin) Shutdown(ctx context.Context) error {
	return a.server.ShutdownWithContext(ctx)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
