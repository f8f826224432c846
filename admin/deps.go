package admin

import (
	"context"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// The interfaces below are what the admin listener calls; each is implemented
// by a concrete type of limit or adaptive (guards at the bottom). They are
// called from concurrent requests and must be safe for concurrent use.

// Limiter decides check API requests and reports its status.
// *limit.Limiter implements it; the check API calls the proxy's limiter, so
// both count against one budget. Allow must return within the store deadline
// (limits.store_timeout); admin does not keep req after Allow or MaxTokens
// returns. MaxTokens is the most tokens a request like req can ever be
// granted and the scope of that limit (a check asking more answers 400); it
// must not call the store. Status is read once per GET /v1/state.
//
// Reset makes the budget of a store key whole again in the store and on
// this pod (DELETE /v1/counters); it must return when ctx ends.
type Limiter interface {
	Allow(ctx context.Context, req *limit.Request) limit.Decision
	MaxTokens(req *limit.Request) (int64, limit.Scope)
	Status() limit.LimiterStatus
	Reset(ctx context.Context, key []byte, p store.Params) error
	// Settle settles what an admitted check reserved (POST
	// /v1/ratelimit/settle); it must not block on the store.
	Settle(r *limit.Reservation, actual int64)
	// Usage answers what a policy limit's budget has left (GET
	// /v1/usage), without taking anything.
	Usage(ctx context.Context, key []byte, p store.Params) (limit.Applied, error)
	// SlotUsage answers how many of a concurrency limit's n slots are held.
	SlotUsage(ctx context.Context, key []byte, n int64) (int64, error)
}

// Catalog is what the admin API reads: the current rules and tenants.
// *catalog.Catalog implements it. Every method reads one immutable snapshot.
type Catalog interface {
	Rules() []catalog.Rule
	Rule(tenant, resource string) (catalog.Rule, bool)
	Tenants() []catalog.Tenant
	Tenant(id string) (catalog.Tenant, bool)
	TenantPlan(id string) (string, bool)
}

// CatalogWriter changes rules, tenants and policies, and lists the
// policies with their origin (the catalog holds them compiled only).
// *catalog.Sync implements it: with Redis it writes through to Redis and
// every pod applies the change within a second; without Redis it changes
// the process's catalog. Put and Delete return a *catalog.ValidationError
// for a bad rule, tenant or policy (the API answers 400 with its field) and
// any other error for a store failure (the API answers 503). They must
// return when ctx ends. Policies and Policy read a snapshot: they do not
// wait for a write. PolicySet is the compiled policies the limiters decide
// with (DELETE /v1/counters?policy= builds their store keys). RuleDefaults
// is a rule as PutRule stores it, the limits section's algorithm and
// window in place of unset ones.
type CatalogWriter interface {
	RuleDefaults(r catalog.Rule) catalog.Rule
	PutRule(ctx context.Context, r catalog.Rule) error
	DeleteRule(ctx context.Context, tenant, resource string) error
	PutTenant(ctx context.Context, t catalog.Tenant) error
	DeleteTenant(ctx context.Context, id string) error
	PutPolicy(ctx context.Context, p catalog.Policy) (created bool, err error)
	DeletePolicy(ctx context.Context, name string) error
	Policies() []catalog.PolicyEntry
	Policy(name string) (catalog.PolicyEntry, bool)
	PolicySet() *catalog.PolicySet
}

// Resets tells every pod that a counter was reset, so that each drops what
// it holds for the store key (DELETE /v1/counters). *limit.ResetBus implements
// it. Publish must return when ctx ends.
type Resets interface {
	Publish(ctx context.Context, key string) error
}

// Adaptive is the adaptive layer as GET /v1/state shows it.
// *adaptive.Controller implements it.
type Adaptive interface {
	State() adaptive.State
}

// ReadyFunc says whether the pod may take traffic and why (readyz). It must
// return quickly: it is called with a context bounded to one second.
type ReadyFunc func(ctx context.Context) (ready bool, reason string)

// ReloadFunc re-reads the configuration and applies what can change while
// running (POST /v1/reload). It returns the keys it applied and the changed
// keys that need a restart; an error (an invalid configuration: one line per
// bad key) leaves the running configuration as it was.
type ReloadFunc func() (applied, restart []string, err error)

// Deps are the configuration and the parts the admin listener serves.
// Limiter, Catalog and Writer are required.
type Deps struct {
	// Config is the listener's configuration; New fills its defaults.
	Config Config
	// Limiter answers the check API and adds its status to GET /v1/state
	// under "limiter".
	Limiter Limiter
	// Catalog is read by the rules, tenants and check APIs.
	Catalog Catalog
	// Writer changes rules, tenants and policies.
	Writer CatalogWriter
	// Resets carries counter resets to every pod (nil: DELETE /v1/counters
	// resets the store and this pod only).
	Resets Resets
	// Adaptive is shown by GET /v1/state under "adaptive" (nil: omitted).
	Adaptive Adaptive
	// Ready decides GET /readyz (nil: always ready).
	Ready ReadyFunc
	// Reload serves POST /v1/reload (nil: 404 on that path).
	Reload ReloadFunc
	// MetricsHelp is the help text of each metric family on /metrics
	// (MetricsHelp reads it from docs/metrics.md); a family without one gets
	// an empty # HELP line.
	MetricsHelp map[string]string
	// TrustRequestID lets a check's request_id spare a sliding_log count
	// (a retry within the limiter's allowance): the caller holds the admin
	// token. false: request_id is accepted and not passed to the limiter.
	TrustRequestID bool
}

// Interface guards.
var (
	_ Limiter       = (*limit.Limiter)(nil)
	_ Catalog       = (*catalog.Catalog)(nil)
	_ CatalogWriter = (*catalog.Sync)(nil)
	_ Resets        = (*limit.ResetBus)(nil)
	_ Adaptive      = (*adaptive.Controller)(nil)
)
