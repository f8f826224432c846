package limit

import (
	"math"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// subject is what the policies read of req.
func subject(req *Request) catalog.Subject {
	return catalog.Subject{IP: req.IP, APIKey: req.APIKey, Tenant: req.Tenant, Plan: req.Plan, Resource: req.Resource,
		Method: req.Method, Host: req.Host, Path: req.Path, Attrs: req.Attrs}
}

// policySpecs appends one spec per limit of each policy that matches req
// and counts it (its key attributes present, not exempt). It allocates
// nothing while specs has room.
func (l *Limiter) policySpecs(specs []spec, req *Request, mult float64) []spec {
	named, any := l.catalog.Policies().For(req.Resource)
	if len(named)+len(any) == 0 {
		return specs
	}
	subj := subject(req)
	for _, p := range named {
		specs = l.policySpec(specs, p, &subj, req, mult)
	}
	for _, p := range any {
		specs = l.policySpec(specs, p, &subj, req, mult)
	}
	return specs
}

// policySpec appends the specs of policy p when it applies to subj.
func (l *Limiter) policySpec(specs []spec, p *catalog.CompiledPolicy, subj *catalog.Subject, req *Request, mult float64) []spec {
	if !p.Matches(subj) {
		return specs
	}
	var idBuf [keyBufLen]byte
	id, ok := p.AppendIdentity(idBuf[:0], subj)
	if !ok {
		return specs
	}
	plan := 1.0
	if p.PlanMultiplier {
		plan = l.catalog.PlanMultiplier(req.Plan)
	}
	for i := range p.Params {
		var s *spec
		specs, s = nextSpec(specs)
		s.scope, s.name, s.shadow, s.counters = ScopePolicy, p.Name, p.Shadow, p.Counters[i]
		s.params = scaleParams(planParams(p.Params[i], plan), mult)
		// {pol:<name>:<limit label>:<identity>}: the identity is escaped
		// already, so it goes in as it is.
		k := store.AppendKeyStrings(s.buf[:0], "", "pol", p.Name, p.Labels[i])
		k = append(k[:len(k)-1], ':')
		k = append(k, id...)
		s.setKey(append(k, '}'))
		l.finish(s, req)
	}
	return specs
}

// planParams multiplies p's budget by a plan multiplier, as limits.tenant
// is: rounded down, at most MaxLimit.
func planParams(p store.Params, plan float64) store.Params {
	if plan == 1 {
		return p
	}
	mul := func(n int64) int64 { return max(1, int64(math.Floor(min(float64(n)*plan, store.MaxLimit)))) }
	if p.Algorithm == store.TokenBucket {
		p.Capacity = mul(p.Capacity)
		p.RefillRate *= plan
	} else {
		p.Limit = mul(p.Limit)
	}
	return p
}

// policyBound lowers most to the smallest capacity among the policies
// that apply to req (see MaxTokens).
func (l *Limiter) policyBound(req *Request, bound func(p store.Params, sc Scope)) {
	named, any := l.catalog.Policies().For(req.Resource)
	subj := subject(req)
	for _, list := range [2][]*catalog.CompiledPolicy{named, any} {
		for _, p := range list {
			var idBuf [keyBufLen]byte
			if !p.Matches(&subj) {
				continue
			}
			if _, ok := p.AppendIdentity(idBuf[:0], &subj); !ok {
				continue
			}
			plan := 1.0
			if p.PlanMultiplier {
				plan = l.catalog.PlanMultiplier(req.Plan)
			}
			for i := range p.Params {
				bound(planParams(p.Params[i], plan), ScopePolicy)
			}
		}
	}
}

// count counts a policy limit's decision: allowed, or refused (in shadow
// mode or not). Other limits are counted per tenant and resource only.
func (s *spec) count(allowed, shadow bool) {
	switch c := s.counters; {
	case c == nil:
	case allowed:
		c.Allowed.Inc()
	case shadow:
		c.ShadowBlocked.Inc()
	default:
		c.Blocked.Inc()
	}
}
