package limit

import (
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// subject is what the policies read of req.
func subject(req *Request) catalog.Subject {
	return catalog.Subject{IP: req.IP, APIKey: req.APIKey, Tenant: req.Tenant, Plan: req.Plan, Resource: req.Resource,
		Method: req.Method, Host: req.Host, Path: req.Path, Attrs: req.Attrs}
}

// scopes are the scopes of the shorthand limits' decisions; a policy
// of the `policies` section is ScopePolicy.
var scopes = [...]Scope{catalog.NotShorthand: ScopePolicy, catalog.ShorthandRule: ScopeRule,
	catalog.ShorthandTenant: ScopeTenant, catalog.ShorthandAPIKey: ScopeAPIKey, catalog.ShorthandIP: ScopeIP}

// policySpec appends the specs of policy p when it applies to subj and
// counts it (its key attributes present, not exempt); idBuf is room for
// its identity. It allocates nothing while specs has room.
func (l *Limiter) policySpec(specs []spec, p *catalog.CompiledPolicy, subj *catalog.Subject, req *Request, mult float64, idBuf []byte) []spec {
	if !p.Matches(subj) {
		return specs
	}
	id, ok := p.AppendIdentity(idBuf, subj)
	if !ok {
		return specs
	}
	plan := l.planOf(p, req)
	for i := range p.Params {
		var s *spec
		specs, s = nextSpec(specs)
		shadow, ok := p.Limit(&s.params, i, subj, plan, mult)
		if !ok {
			specs = specs[:len(specs)-1]
			continue
		}
		s.scope, s.name, s.shadow, s.counters = scopes[p.Shorthand], p.Items[i], shadow, p.Counters[i]
		if i < len(p.Metered) {
			s.meter, s.maxWait = p.Metered[i], p.MaxWait[i]
		}
		s.setKey(p.AppendKey(s.buf[:0], i, id, subj))
		l.finish(s, req)
	}
	return specs
}

// policyBound lowers most to the smallest capacity among the limits that
// apply to req, as specs finds them (see MaxTokens).
func (l *Limiter) policyBound(req *Request, bound func(p store.Params, sc Scope)) {
	named, any := l.policies.For(req.Resource)
	subj := subject(req)
	for _, list := range [...][]*catalog.CompiledPolicy{l.shorthand, named, any} {
		for _, p := range list {
			if !p.Counts(&subj) {
				continue
			}
			for i := range p.Params {
				var params store.Params
				if _, ok := p.Limit(&params, i, &subj, l.planOf(p, req), 1); ok {
					bound(params, scopes[p.Shorthand])
				}
			}
		}
	}
}

// planOf is the plan multiplier of p's limits for req (1 unless the
// policy takes it).
func (l *Limiter) planOf(p *catalog.CompiledPolicy, req *Request) float64 {
	if !p.PlanMultiplier || l.catalog == nil {
		return 1
	}
	return l.catalog.PlanMultiplier(req.Plan)
}
