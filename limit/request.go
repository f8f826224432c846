package limit

import (
	"time"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// Request is one decision as the request path asks it. The limiter does not
// keep it, nor its byte slices, after Allow returns.
type Request struct {
	// IP is the client IP in text form (the IP limit's key). Empty: no IP limit.
	IP []byte
	// APIKey is the client's API key. Empty: anonymous (no API key limit).
	APIKey []byte
	// Tenant and Plan identify the customer; empty Tenant: anonymous (no
	// tenant limit; the rule of AnonymousTenant for Resource, per IP).
	Tenant string
	Plan   string
	// Resource is the route's resource name (rules are per tenant and resource).
	Resource string
	// RequestID lets sliding_log skip a request it already counted. Callers
	// set it only when the ID can be trusted (check API callers, an
	// X-Request-Id set by a trusted proxy).
	RequestID []byte
	// Tokens is the number of permits asked for; 0 means 1.
	Tokens int64
	// Limits are limits the caller names (see Limit), decided after the
	// derived ones; every limit must pass. nil for the request path.
	Limits []Limit
	// Peek decides whether Tokens more would pass without taking them:
	// the permits a limit grants are given back before Allow returns.
	Peek bool
}

// Scope names the limit a decision is about.
type Scope uint8

const (
	ScopeNone   Scope = iota // no limit applied
	ScopeIP                  // limits.ip
	ScopeAPIKey              // limits.api_key
	ScopeTenant              // limits.tenant × plan
	ScopeRule                // a rule for (tenant, resource)
	ScopeLimit               // a Limit of the request (Decision.Name names it)
)

// String returns the scope's name, as used in JSON bodies and metric labels.
func (s Scope) String() string {
	switch s {
	case ScopeIP:
		return "ip"
	case ScopeAPIKey:
		return "api_key"
	case ScopeTenant:
		return "tenant"
	case ScopeRule:
		return "rule"
	case ScopeLimit:
		return "limit"
	}
	return "none"
}

// Decision is the limiter's answer. When the request is rejected, Scope,
// Limit, Remaining, RetryAfter and Reset describe the limit that rejected it;
// when it passes, the most restrictive of the limits that applied (the one
// with the least remaining budget).
type Decision struct {
	Allowed bool
	// Shadowed is set when a limit would have rejected the request but runs
	// in shadow mode (limits.shadow or the rule's shadow flag): Allowed is true.
	Shadowed bool
	// Unavailable is set when the store is down and limits.on_store_failure
	// is closed: the request is rejected with 503, not 429.
	Unavailable bool
	Scope       Scope
	// Name is the Limit's Name when Scope is ScopeLimit.
	Name      string
	Limit     int64
	Remaining int64
	// RetryAfter is when a permit may next be available (0 if allowed;
	// negative: never, for a token bucket that does not refill).
	RetryAfter time.Duration
	// Reset is until the budget is whole again.
	Reset time.Duration
	// Window is the limit's window (for a token bucket: capacity / refill
	// rate), for the RateLimit-Policy header.
	Window time.Duration
}

// Adjuster scales the effective limits under load. *adaptive.Controller
// implements it: multiplier in (0, 1] (1 in Normal mode), strict when every
// decision must ask the store (lease size 1). Called on the request path: it
// must be an atomic read.
type Adjuster interface {
	LimitAdjustment() (multiplier float64, strict bool)
}

// Options are the parts a Limiter uses besides its config and store.
type Options struct {
	// Adjuster scales limits under load (nil: multiplier 1, not strict).
	Adjuster Adjuster
	// LivePods is the number of live gateway pods; the local fallback
	// enforces limit / LivePods() per pod (nil: 1).
	LivePods func() int
	// Catalog holds the tenants' plans and the rules (nil: no rules; plan
	// multipliers default to 1).
	Catalog *catalog.Catalog
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}
