package limit

import (
	"github.com/sentinel-gateway/sentinel/limit/policy"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// subject is what the policies read of req.
func subject(req *Request) policy.Subject {
	return policy.Subject{IP: req.IP, APIKey: req.APIKey, Tenant: req.Tenant, Plan: req.Plan, Resource: req.Resource,
		Method: req.Method, Host: req.Host, Path: req.Path, Attrs: req.Attrs}
}

// policySpecs appends one spec per limit of each policy that matches req
// and counts it (its key attributes present, not exempt). It allocates
// nothing while specs has room.
func (l *Limiter) policySpecs(specs []spec, req *Request, mult float64) []spec {
	named, any := l.policies.For(req.Resource)
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
func (l *Limiter) policySpec(specs []spec, p *policy.Compiled, subj *policy.Subject, req *Request, mult float64) []spec {
	if !p.Matches(subj) {
		return specs
	}
	var idBuf [keyBufLen]byte
	id, ok := p.AppendIdentity(idBuf[:0], subj)
	if !ok {
		return specs
	}
	plan := l.planOf(p, req)
	for i := range p.Params {
		var s *spec
		specs, s = nextSpec(specs)
		s.scope, s.name, s.shadow, s.counters = ScopePolicy, p.Items[i], p.Shadow, p.Counters[i]
		s.params = scaleParams(p.LimitParams(i, plan), mult)
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

// policyBound lowers most to the smallest capacity among the policies
// that apply to req (see MaxTokens).
func (l *Limiter) policyBound(req *Request, bound func(p store.Params, sc Scope)) {
	named, any := l.policies.For(req.Resource)
	subj := subject(req)
	for _, list := range [2][]*policy.Compiled{named, any} {
		for _, p := range list {
			for i := range p.Params {
				if p.Counts(&subj) {
					bound(p.LimitParams(i, l.planOf(p, req)), ScopePolicy)
				}
			}
		}
	}
}

// planOf is the plan multiplier of p's limits for req (1 unless the
// policy takes it).
func (l *Limiter) planOf(p *policy.Compiled, req *Request) float64 {
	if !p.PlanMultiplier {
		return 1
	}
	return l.catalog.PlanMultiplier(req.Plan)
}
