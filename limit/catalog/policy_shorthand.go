package catalog

import (
	"math"
	"time"
	"unsafe"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Shorthand is the shorthand limit a compiled policy is, if any: the
// `limits` section's tenant, api_key and ip limits and the rules are
// policies written short. A shorthand keeps the store key it had before
// policies existed, so that counters carry on across an upgrade, and its
// own scope in answers.
type Shorthand uint8

// The shorthand limits, in the order a request decides them.
const (
	// NotShorthand is a `policies` entry: {pol:<name>:<limit label>:<identity>}.
	NotShorthand Shorthand = iota
	// ShorthandRule is the rules: {rule:<tenant>:<resource>}, or
	// {rule:*anonymous*:<resource>:<ip>} for a request without a tenant.
	ShorthandRule
	// ShorthandTenant is limits.tenant: {tenant:<tenant>}.
	ShorthandTenant
	// ShorthandAPIKey is limits.api_key: {key:<api key>}, the key as it
	// is, however long.
	ShorthandAPIKey
	// ShorthandIP is limits.ip: {ip:<ip>}.
	ShorthandIP
)

// Source gives the one limit of a policy whose budget is resolved for
// each request rather than fixed when it is compiled: a rule looked up in
// the catalog, or a limit of the `limits` section, whose multipliers apply
// before its algorithm's parameters derive from it. It is a concrete type,
// not an interface, so that the request path calls it directly and the
// request it reads stays on the stack. It is read-only.
type Source struct {
	// rules, when not nil, holds the rule of the request's tenant (or
	// *anonymous*, for a request without one) and resource.
	rules *Catalog
	// Else the limit is base per window: params under no multiplier.
	base   int64
	window time.Duration
	params store.Params
}

// baseSource is the Source of a limit of the `limits` section, n per
// window of def.
func baseSource(n int64, def Defaults) *Source {
	return &Source{base: n, window: def.Window, params: baseParams(n, def)}
}

// Resolve sets *dst to the limit's store parameters for s under the plan
// multiplier (1 unless the policy takes it) and the adaptive one (mult,
// in (0, 1]); it returns whether the limit only counts (shadow), and ok
// false when no limit applies to s (dst is then left as it was). It
// writes dst in place, as the request path builds each limit where it
// keeps it, and allocates nothing.
//
// A limit of the `limits` section is n per window: the plan's and the
// adaptive multipliers scale n, each rounded down, before the algorithm's
// parameters derive from it (a token bucket refills the scaled n over a
// window), as they did before policies.
func (src *Source) Resolve(dst *store.Params, s *Subject, plan, mult float64) (shadow, ok bool) {
	if src.rules != nil {
		r, _ := src.rules.Lookup(s.Tenant, s.Resource, len(s.IP) > 0)
		if r == nil {
			return false, false
		}
		*dst = r.Params
		scaleInPlace(dst, mult)
		return r.Shadow, true
	}
	*dst = src.params
	if plan == 1 && mult >= 1 {
		return false, true
	}
	n := src.base
	if plan != 1 {
		n = int64(math.Floor(min(float64(n)*plan, store.MaxLimit)))
	}
	if n = scale(n, mult); dst.Algorithm == store.TokenBucket {
		dst.Capacity, dst.RefillRate = n, float64(n)/src.window.Seconds()
	} else {
		dst.Limit = n
	}
	return false, true
}

// Shorthands are the shorthand limits of the `limits` section: each is off
// at 0.
type Shorthands struct {
	Tenant, APIKey, IP int64
	// IPAnonymous: limits.ip applies only to requests without a known API
	// key (limits.ip_scope: anonymous).
	IPAnonymous bool
}

// CompileShorthand compiles the shorthand limits into the policies they
// are, in the order a request decides them: the rules of cat (none when
// it is nil), then tenant, api_key and ip. Their limits use the defaults'
// algorithm and window.
func CompileShorthand(sh Shorthands, def Defaults, cat *Catalog) []*CompiledPolicy {
	var out []*CompiledPolicy
	if cat != nil {
		// {match: {resources: [R]}, key: [tenant, resource]} for each rule,
		// looked up in the catalog by (tenant, resource), not compiled one
		// by one: the catalog holds many and changes at run time.
		out = append(out, shorthand(&Policy{Name: "rules"}, ShorthandRule, def, &Source{rules: cat}))
	}
	if sh.Tenant > 0 {
		c := &Policy{Name: "tenant", Key: []string{"tenant"}, Limits: baseLimits(sh.Tenant, def)}
		out = append(out, shorthand(c, ShorthandTenant, def, baseSource(sh.Tenant, def)))
	}
	if sh.APIKey > 0 {
		no := false
		c := &Policy{Name: "api_key", Key: []string{"api_key"}, Limits: baseLimits(sh.APIKey, def), PlanMultiplier: &no}
		out = append(out, shorthand(c, ShorthandAPIKey, def, baseSource(sh.APIKey, def)))
	}
	if sh.IP > 0 {
		c := &Policy{Name: "ip", Key: []string{"ip"}, Limits: baseLimits(sh.IP, def)}
		if sh.IPAnonymous {
			yes := true
			c.Match.Anonymous = &yes
		}
		out = append(out, shorthand(c, ShorthandIP, def, baseSource(sh.IP, def)))
	}
	return out
}

// shorthand compiles c, the policy a shorthand limit is. Its limits have
// no item name nor counters of their own: answers name them by their
// scope, as before policies.
func shorthand(c *Policy, sh Shorthand, def Defaults, src *Source) *CompiledPolicy {
	cp := compile(c, def)
	cp.Shorthand, cp.Source = sh, src
	if src != nil && len(cp.Params) == 0 {
		cp.Params, cp.Labels = []store.Params{{}}, []string{""}
	}
	cp.Items = make([]string, len(cp.Params))
	cp.Counters = make([]*PolicyCounters, len(cp.Params))
	return cp
}

// baseLimits are the limits of a shorthand of the `limits` section: n per
// window (baseLimit).
func baseLimits(n int64, def Defaults) PolicyLimits { return PolicyLimits{baseLimit(n, def)} }

// baseParams are baseLimit's store parameters (its Params), derived
// directly.
func baseParams(n int64, def Defaults) store.Params {
	if def.Algorithm == store.TokenBucket {
		return store.Params{Algorithm: store.TokenBucket, Capacity: n, RefillRate: float64(n) / def.Window.Seconds()}
	}
	return store.Params{Algorithm: def.Algorithm, Limit: n, Window: def.Window}
}

// baseLimit is n per window under the default algorithm; as a token
// bucket, n tokens refilled over a window.
func baseLimit(n int64, def Defaults) PolicyLimit {
	if def.Algorithm == store.TokenBucket {
		return PolicyLimit{Algorithm: store.TokenBucket, Capacity: n, RefillRate: float64(n) / def.Window.Seconds()}
	}
	return PolicyLimit{Algorithm: def.Algorithm, Limit: n}
}

// Scale applies the adaptive multiplier mult, in (0, 1], to p's budget.
func Scale(p store.Params, mult float64) store.Params {
	scaleInPlace(&p, mult)
	return p
}

// scaleInPlace is Scale on *p.
func scaleInPlace(p *store.Params, mult float64) {
	if mult >= 1 {
		return
	}
	if p.Algorithm == store.TokenBucket {
		p.Capacity = scale(p.Capacity, mult)
		p.RefillRate *= mult
	} else {
		p.Limit = scale(p.Limit, mult)
	}
}

// scale applies the adaptive multiplier; a limit that is on stays >= 1.
func scale(limit int64, mult float64) int64 {
	if mult >= 1 || limit <= 0 {
		return limit
	}
	return max(1, int64(float64(limit)*mult))
}

// Limit sets *dst to limit i of the policy as it applies to s: its store
// parameters under plan, the plan's multiplier (1 unless the policy takes
// it), and mult, the adaptive one. It returns whether the limit only
// counts, and ok false when none applies (a Source may have none for s;
// dst is then left as it was). It allocates nothing.
func (p *CompiledPolicy) Limit(dst *store.Params, i int, s *Subject, plan, mult float64) (shadow, ok bool) {
	if p.Source != nil {
		shadow, ok = p.Source.Resolve(dst, s, plan, mult)
		return shadow || p.Shadow, ok
	}
	*dst = p.LimitParams(i, plan)
	scaleInPlace(dst, mult)
	return p.Shadow, true
}

// AppendKey appends the store key of limit i for s to dst: id is the
// identity AppendIdentity gave. A shorthand's key is the one it had
// before policies; it allocates only when dst is too small.
func (p *CompiledPolicy) AppendKey(dst []byte, i int, id []byte, s *Subject) []byte {
	switch p.Shorthand {
	case ShorthandRule:
		if s.Tenant != "" {
			return store.AppendKeyStrings(dst, "", "rule", s.Tenant, s.Resource)
		}
		// The IP is read as a string for this call only: no copy.
		ip := unsafe.String(unsafe.SliceData(s.IP), len(s.IP))
		return store.AppendKeyStrings(dst, "", "rule", AnonymousTenant, s.Resource, ip)
	case ShorthandTenant:
		return store.AppendKeyStrings(dst, "", "tenant", s.Tenant)
	case ShorthandAPIKey:
		return store.AppendKey(dst, "", "key", s.APIKey)
	case ShorthandIP:
		return store.AppendKey(dst, "", "ip", s.IP)
	}
	// {pol:<name>:<limit label>:<identity>}: the identity is escaped
	// already, so it goes in as it is.
	k := store.AppendKeyStrings(dst, "", "pol", p.Name, p.Labels[i])
	k = append(k[:len(k)-1], ':')
	k = append(k, id...)
	return append(k, '}')
}
