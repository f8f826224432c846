package limit

import (
	"math"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/limitconf"
	"github.com/sentinel-gateway/sentinel/limit/policy"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// keyBufLen is the room for a key on the stack; longer keys allocate.
const keyBufLen = 160

// spec is one limit that applies to a request.
type spec struct {
	scope  Scope
	name   string // a Limit's Name
	params store.Params
	limit  int64         // Limit or Capacity, as shown in decisions
	most   int64         // the most tokens one decision can take
	window time.Duration // for RateLimit-Policy
	ttl    time.Duration // lease lifetime
	shadow bool
	// counters count a policy limit's decisions (nil for other limits).
	counters *policy.Counters
	useRID   bool // sliding_log with a trusted request ID: always ask the store
	// The key is buf[:keyLen], or big when it did not fit. The spec never
	// holds a slice of its own buf, so that it can stay on the stack.
	keyLen int
	big    string
	buf    [keyBufLen]byte
}

// setKey records a key built by appending to s.buf[:0].
func (s *spec) setKey(k []byte) {
	if len(k) <= keyBufLen && cap(k) == keyBufLen {
		s.keyLen, s.big = len(k), ""
		return
	}
	s.keyLen, s.big = 0, string(k)
}

// key returns the spec's key; it allocates only for a key longer than the
// buffer.
func (s *spec) key() []byte {
	if s.big != "" {
		return []byte(s.big)
	}
	return s.buf[:s.keyLen]
}

// maxLocalSpecs is how many limits one decision keeps on the stack; a
// request that more limits apply to (policies, named Limits) is decided
// the same way from a slice that the append allocates.
const maxLocalSpecs = 8

// nextSpec extends specs by one zero spec and returns it.
func nextSpec(specs []spec) ([]spec, *spec) {
	if len(specs) < cap(specs) {
		specs = specs[:len(specs)+1]
		s := &specs[len(specs)-1]
		*s = spec{}
		return specs, s
	}
	specs = append(specs, spec{})
	return specs, &specs[len(specs)-1]
}

// specs appends the limits that apply to req: the rule first (usually the
// tightest), then tenant, API key and IP, then the policies.
func (l *Limiter) specs(specs []spec, req *Request, mult float64) []spec {
	if l.catalog != nil {
		if r, anon := l.catalog.Lookup(req.Tenant, req.Resource, len(req.IP) > 0); r != nil {
			var s *spec
			specs, s = nextSpec(specs)
			s.scope = ScopeRule
			s.params = scaleParams(r.Params, mult)
			s.shadow = r.Shadow
			s.setKey(appendRuleKey(s.buf[:0], req, anon))
			l.finish(s, req)
		}
	}
	if l.cfg.Tenant > 0 && req.Tenant != "" {
		var s *spec
		specs, s = nextSpec(specs)
		l.baseSpec(s, ScopeTenant, scale(l.tenantLimit(req.Plan), mult))
		s.setKey(store.AppendKeyStrings(s.buf[:0], "", "tenant", req.Tenant))
		l.finish(s, req)
	}
	if l.cfg.APIKey > 0 && len(req.APIKey) > 0 {
		var s *spec
		specs, s = nextSpec(specs)
		l.baseSpec(s, ScopeAPIKey, scale(l.cfg.APIKey, mult))
		s.setKey(store.AppendKey(s.buf[:0], "", "key", req.APIKey))
		l.finish(s, req)
	}
	if l.ipApplies(req) {
		var s *spec
		specs, s = nextSpec(specs)
		l.baseSpec(s, ScopeIP, scale(l.cfg.IP, mult))
		s.setKey(store.AppendKey(s.buf[:0], "", "ip", req.IP))
		l.finish(s, req)
	}
	return l.policySpecs(specs, req, mult)
}

// scaleParams applies the adaptive multiplier to p's budget.
func scaleParams(p store.Params, mult float64) store.Params {
	if p.Algorithm == store.TokenBucket {
		p.Capacity = scale(p.Capacity, mult)
		p.RefillRate *= mult
	} else {
		p.Limit = scale(p.Limit, mult)
	}
	return p
}

// ipApplies reports whether limits.ip applies to req (limits.ip_scope).
func (l *Limiter) ipApplies(req *Request) bool {
	return l.cfg.IP > 0 && len(req.IP) > 0 &&
		(l.cfg.IPScope != limitconf.IPScopeAnonymous || req.Tenant == "" && len(req.APIKey) == 0)
}

// baseSpec makes s a limit of the base configuration (tenant, API key, IP)
// for scope, under the configured default algorithm.
func (l *Limiter) baseSpec(s *spec, scope Scope, limit int64) *spec {
	s.scope, s.shadow, s.name = scope, false, ""
	s.params = l.baseParams(limit)
	return s
}

// scale applies the adaptive multiplier; a limit that is on stays >= 1.
func scale(limit int64, mult float64) int64 {
	if mult >= 1 || limit <= 0 {
		return limit
	}
	return max(1, int64(float64(limit)*mult))
}

// tenantLimit is limits.tenant times the plan's multiplier.
func (l *Limiter) tenantLimit(plan string) int64 {
	base := float64(l.cfg.Tenant)
	if l.catalog != nil {
		base *= l.catalog.PlanMultiplier(plan)
	}
	return int64(math.Floor(min(base, store.MaxLimit)))
}

// baseParams are the params of a base limit under the configured default
// algorithm.
func (l *Limiter) baseParams(limit int64) store.Params {
	if l.alg == store.TokenBucket {
		return store.Params{Algorithm: l.alg, Capacity: limit, RefillRate: float64(limit) / l.cfg.Window.Seconds()}
	}
	return store.Params{Algorithm: l.alg, Limit: limit, Window: l.cfg.Window}
}

// mostOf is the most tokens one decision under p can take: its capacity,
// and at most MaxLogTokens for sliding_log.
func mostOf(p *store.Params) int64 {
	switch p.Algorithm {
	case store.TokenBucket:
		return p.Capacity
	case store.SlidingLog:
		return min(p.Limit, store.MaxLogTokens)
	}
	return p.Limit
}

// finish derives the shown limit and window and the lease lifetime.
func (l *Limiter) finish(s *spec, req *Request) {
	p := &s.params
	s.useRID = p.Algorithm == store.SlidingLog && len(req.RequestID) > 0
	s.most = mostOf(p)
	if p.Algorithm == store.TokenBucket {
		s.limit = p.Capacity
		s.window = 0
		if p.RefillRate > 0 {
			s.window = time.Duration(float64(p.Capacity) / p.RefillRate * float64(time.Second))
		}
		// A leased token is taken at once: the lifetime only bounds how
		// long unused tokens stay local.
		s.ttl = min(l.cfg.LeaseTTL, 100*time.Millisecond)
		return
	}
	s.limit, s.window = p.Limit, p.Window
	if p.Algorithm == store.Quota && p.Window == 0 { // the current period's length, for the headers
		start, end := p.Period.Bounds(l.now(), p.Zone)
		s.window = end.Sub(start)
	}
	// A lease's unused permits count in the store until it expires plus a
	// window, so a long lifetime wastes budget: keep it to 1/30 of the
	// window, but at least four store round trips, or leases would expire
	// on arrival, before their permits are used.
	s.ttl = max(time.Millisecond, min(l.cfg.LeaseTTL, max(p.Window/30, 4*time.Duration(l.rtt.Load()))))
}

// decision builds a Decision about this limit.
func (s *spec) decision(allowed bool, remaining int64, retry time.Duration, reset int64) Decision {
	return Decision{
		Allowed:    allowed,
		Scope:      s.scope,
		Name:       s.name,
		Limit:      s.limit,
		Remaining:  max(min(remaining, s.limit), 0),
		RetryAfter: retry,
		Reset:      time.Duration(max(reset, 0)),
		Window:     s.window,
	}
}
