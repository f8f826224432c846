package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// The interfaces below are what the proxy calls; each is implemented by a
// concrete type of limit, adaptive or upstream (guards at the bottom) and by
// func-field fakes in tests. All of them are called on the request path,
// concurrently, and must be safe for concurrent use.

// Limiter decides whether a request may pass. *limit.Limiter implements it.
// Decide writes the decision to d, replacing what d held; it must return
// within the store deadline (limits.store_timeout) and allocate nothing when
// served from a local lease. The proxy does not keep req after Decide
// returns.
type Limiter interface {
	Decide(ctx context.Context, req *limit.Request, d *limit.Decision)
}

// Tenants maps an API key to its tenant. *catalog.Catalog implements it.
// LookupAPIKey must allocate nothing and not keep key; the returned tenant is
// read-only and stays valid for the request.
type Tenants interface {
	LookupAPIKey(key []byte) (*catalog.Tenant, bool)
}

// Gate is the adaptive layer as the request path sees it.
// *adaptive.Controller implements it. Policy, RequestStarted,
// RequestFinished and ObserveUpstream are atomic operations ("needs to be
// instantaneous"); their conn is the request's connection ID, which picks
// the stripe of the counters they write. Its Limits bind the routes of the
// table New builds.
type Gate interface {
	Policy() adaptive.Policy
	RequestStarted(conn uint64)
	RequestFinished(conn uint64)
	RequestWaiting(conn uint64)
	RequestResumed(conn uint64)
	ObserveUpstream(conn uint64, end time.Time, latency time.Duration, r adaptive.Result)
	Limits
}

// Limits resolves an upstream name to its concurrency limiter.
// *adaptive.Controller and a reload's *adaptive.Update implement it.
// Concurrency is called once per route when a table is built; it may
// return nil (no concurrency limit for that upstream).
type Limits interface {
	Concurrency(upstream string) *adaptive.ConcurrencyLimiter
}

// Upstreams resolves a route's upstream name to its pool. *upstream.Set
// and a reload's *upstream.Update implement it. It is called once per
// route when a table is built.
type Upstreams interface {
	Pool(name string) *upstream.Pool
}

// Doer forwards one request, sent at start (the caller's clock read), to an
// upstream pool and returns when the answer came (its own clock read, which
// the caller reuses). *upstream.Pool implements it. Its error and the
// answer's status are sorted by upstream.Classify:
// a *upstream.ClientBodyError (the client broke its body → 400/408/413),
// upstream.ErrNoHealthy (→ 503), upstream.ErrTimeout (→ 504), anything else
// is a connection failure (→ 502).
type Doer interface {
	DoAt(req *fasthttp.Request, resp *fasthttp.Response, start time.Time) (end time.Time, err error)
}

// Cache is the response cache. *cache.Cache implements it. Get copies a
// fresh entry into dst and reports whether there was one; Set stores resp
// for ttl (skipping Cache-Control: no-store/private answers). Neither keeps
// key; both must be safe for concurrent use.
type Cache interface {
	Get(key []byte, dst *fasthttp.Response) bool
	Set(key []byte, resp *fasthttp.Response, ttl time.Duration)
	// MaxBody is the largest answer body the cache may keep: larger
	// answers on cacheable routes are streamed, not read whole.
	MaxBody() int
}

// concurrency is the per-upstream adaptive concurrency limit.
// *adaptive.ConcurrencyLimiter implements it: Acquire waits briefly for a
// slot and reports false when the request must be shed; route is the key
// of the route's latency baseline, which Route gave when the table was
// built.
type concurrency interface {
	Acquire(prio adaptive.Priority, route adaptive.Route) (adaptive.Ticket, bool)
}

// Interface guards.
var (
	_ Limiter     = (*limit.Limiter)(nil)
	_ Tenants     = (*catalog.Catalog)(nil)
	_ concurrency = (*adaptive.ConcurrencyLimiter)(nil)
	_ Gate        = (*adaptive.Controller)(nil)
	_ Limits      = (*adaptive.Update)(nil)
	_ Upstreams   = (*upstream.Set)(nil)
	_ Upstreams   = (*upstream.Update)(nil)
)

// Deps are the configuration and the parts a Server uses. Only Config and
// Upstreams are required; a nil Limiter, Tenants, Adaptive or Cache switches
// that feature off.
type Deps struct {
	Config    Config
	Limiter   Limiter
	Tenants   Tenants
	Adaptive  Gate
	Upstreams Upstreams
	Cache     Cache
	// Log receives the proxy server's own log lines: unreadable requests,
	// rate-limited (nil: slog.Default()).
	Log *slog.Logger
	// AccessLog, when set, receives one line per request (log.access);
	// AccessRefusals caps the lines of refused requests a second.
	AccessLog      *slog.Logger
	AccessRefusals int
	// Pools, when set, replaces Upstreams' lookup (tests; and a main that
	// wants its own Doer per upstream name). A nil Doer means "unknown".
	Pools func(name string) Doer
}

// limits is the Gate's Limits, nil without a Gate.
func (d *Deps) limits() Limits {
	if d.Adaptive == nil {
		return nil
	}
	return d.Adaptive
}
