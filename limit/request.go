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
	// Method, Host (the Host header, port included or not) and Path are
	// what policies match and key on; nil: the policies that need them
	// do not apply.
	Method, Host, Path []byte
	// Attrs reads the request's headers and query parameters for the
	// policies (nil: none). A pointer type in it keeps Allow free of
	// allocations.
	Attrs Attrs
	// RequestID lets sliding_log skip a request it already counted. Callers
	// set it only when the ID can be trusted (check API callers, an
	// X-Request-Id set by a trusted proxy).
	RequestID []byte
	// Tokens is the number of permits asked for; 0 means 1.
	Tokens int64
	// Limits are limits the caller names (see Limit), decided after the
	// derived ones; every limit must pass. nil for the request path.
	Limits []Limit
	// Peek answers whether Tokens more would pass each limit, and its
	// remaining budget, without taking anything: the store looks (see
	// store.LeaseRequest.Want), so no other request, on any pod, can be
	// refused because of a peek. The answer lists every limit (Applied);
	// a store that cannot answer makes it Unavailable.
	Peek bool
	// Cost, when set, is the cost every cost limit reserves (the check
	// API's, which knows it); 0: each estimates it from Attrs, Body and
	// BodyLen (catalog.Metered.Estimate).
	Cost int64
	// Body is the request's body when a cost limit reads its estimate from
	// it and the caller read it whole (nil otherwise); BodyLen its length
	// (-1 unknown).
	Body    []byte
	BodyLen int64
	// waiting: the request waited for its turn (Limiter.Wait): it does
	// not queue behind the others again.
	waiting bool
	// Arrived, when set, is when the request arrived, read by the caller
	// from the limiter's clock (Options.Now; the proxy passes the reading
	// its HTTP server took for the request): the decision is made at that
	// time and its duration (rate_limit_latency_ms) counts from it, which
	// saves a clock reading per decision. Zero: Decide reads the clock.
	Arrived time.Time
}

// Attrs reads a request's headers and query parameters (see
// catalog.Attrs): the request path implements it over the request it
// serves, the check API over its JSON fields.
type Attrs = catalog.Attrs

// Scope names the limit a decision is about.
type Scope uint8

const (
	ScopeNone   Scope = iota // no limit applied
	ScopeIP                  // limits.ip
	ScopeAPIKey              // limits.api_key
	ScopeTenant              // limits.tenant × plan
	ScopeRule                // a rule for (tenant, resource)
	ScopeLimit               // a Limit of the request (Decision.Name names it)
	ScopePolicy              // a policy (Decision.Name names it)
)

var scopeNames = [...]string{"none", "ip", "api_key", "tenant", "rule", "limit", "policy"}

// String returns the scope's name, as used in JSON bodies and metric labels.
func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
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
	// Name is the Limit's Name when Scope is ScopeLimit, the policy's
	// when it is ScopePolicy.
	Name      string
	Limit     int64
	Remaining int64
	// RetryAfter is when a permit may next be available (0 if allowed;
	// negative: never, for a token bucket that does not refill).
	RetryAfter time.Duration
	// Reset is until the budget is whole again.
	Reset time.Duration
	// Window is the limit's window (for a token bucket: capacity / refill
	// rate; for a quota: its current period's length), for the
	// RateLimit-Policy header.
	Window time.Duration
	// Applied lists the limits that apply to the request (the first
	// MaxApplied), in the order they are decided, whether it passed or
	// not, so that RateLimit-Policy names the same limits in every answer.
	// A refusal decides no limit after the one that refused: those are
	// listed undecided, with their Limit and Window only (Remaining and
	// Reset 0), and take no permit.
	Applied  [MaxApplied]Applied
	NApplied int
	// Reserved are the reservations of an admitted request's cost and
	// count_if limits (the first MaxReserved), which the caller settles
	// when the answer ends (Limiter.Settle); NReserved how many.
	Reserved  [MaxReserved]Reservation
	NReserved int
	// MaxWait is how long the limit that refused the request lets it wait
	// for its permit or slot (max_wait; 0: refused at once): see
	// Limiter.Wait. waitOn is that limit's key.
	MaxWait      time.Duration
	waitOn       string
	waitCounters *catalog.PolicyCounters
	// Decided is when the decision was made: the limiter's clock reading
	// at its end (Decide's callers use it rather than read the clock again).
	Decided time.Time
}

// MaxApplied bounds Decision.Applied: a fixed array keeps a decision free
// of allocations (a request that more limits apply to lists the first).
const MaxApplied = 8

// Applied is one limit of a decision, named by its Scope, or by its Name
// for a Limit; its fields mean what Decision's do.
type Applied struct {
	Scope            Scope
	Name             string
	Limit, Remaining int64
	Window, Reset    time.Duration
}

// verdict is one limit's answer within a decision: Decision's fields
// without its list of the limits that applied, so that deciding each limit
// does not zero and copy that list (about 450 bytes) on its way up.
type verdict struct {
	Allowed, Shadowed, Unavailable bool
	Scope                          Scope
	Name                           string
	Limit, Remaining               int64
	RetryAfter, Reset, Window      time.Duration
}

// answer completes d, whose Applied lists the request's limits, with v,
// the limit that answers for the request.
func (d *Decision) answer(v *verdict) {
	d.Allowed, d.Shadowed, d.Unavailable, d.Scope, d.Name = v.Allowed, v.Shadowed, v.Unavailable, v.Scope, v.Name
	d.Limit, d.Remaining, d.RetryAfter, d.Reset, d.Window = v.Limit, v.Remaining, v.RetryAfter, v.Reset, v.Window
}

// note lists x, one limit of d's request, in d.Applied while there is
// room (an Unavailable x decided nothing).
func (d *Decision) note(x *verdict) {
	if d.NApplied < MaxApplied && !x.Unavailable {
		d.Applied[d.NApplied] = Applied{x.Scope, x.Name, x.Limit, x.Remaining, x.Window, x.Reset}
		d.NApplied++
	}
}

// noteUndecided lists specs, limits of d's request that a refusal left
// undecided, while there is room: their limit and window only.
func (d *Decision) noteUndecided(specs []spec) {
	for i := range specs {
		if d.NApplied == MaxApplied {
			return
		}
		s := &specs[i]
		d.Applied[d.NApplied] = Applied{Scope: s.scope, Name: s.name, Limit: s.limit, Window: s.window}
		d.NApplied++
	}
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
	// RecentPods is the number of pods with a heartbeat within the last
	// PartitionHold, gone ones included, as the store keeps them: a
	// pod started since holds their shares too (nil: none known).
	RecentPods func() int
	// SuspectPods is the number of pods counted in LivePods only because
	// this pod came back from an outage of its own moments ago, whose last
	// heartbeat is older than PeerNotice: their shares of a contested key
	// are held as if they were missing (nil: none).
	SuspectPods func() int
	// PeerNotice is how long after a pod's last heartbeat the other pods
	// may still count it live (the heartbeats' lifetime plus an exchange
	// or two): a pod cut off from the store grants more of a contested
	// key than the store's last answer left it only after that (0: at once).
	PeerNotice time.Duration
	// HeartbeatAt is when this pod's last heartbeat may have reached the store (nil
	// or zero: unknown; then the time its calls for a key began to fail
	// stands in): the others count it live until then plus PeerNotice.
	HeartbeatAt func() time.Time
	// HeartbeatTTL is how long the others count this pod live after its
	// last heartbeat reached the store (adaptive.pressure_ttl; 0: unknown).
	// Past it they hold its share, and it decides the keys that were not
	// contested alone until they read its heartbeat again (see
	// Limiter.StoreReachable).
	HeartbeatTTL time.Duration
	// HeartbeatEvery is how often this pod publishes its heartbeat
	// (adaptive.cluster_interval; 0: unknown): another pod's last heartbeat
	// may be that much older than this one's (see Limiter.blind).
	HeartbeatEvery time.Duration
	// Catalog holds the tenants' plans and the rules (nil: no rules; plan
	// multipliers default to 1).
	Catalog *catalog.Catalog
	// Policies are the compiled `policies` section (nil: none).
	Policies *catalog.PolicySet
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Succeeds is the limiter this one replaces (a reload), or nil: the new
	// one goes on from what it knows of the keys (see Limiter.succeed).
	// Both may decide at once until the old one is closed.
	Succeeds *Limiter
}
