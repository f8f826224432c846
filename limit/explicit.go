package limit

import (
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Limit is a limit its caller names and keys itself, decided beside the
// limits the limiter derives from the request's IP, API key, tenant and
// resource (with none of those set, instead of them). The rate limit
// service decides an Envoy descriptor matched by a configuration file this
// way: the file, not the limiter's configuration, says the limit.
type Limit struct {
	// Name identifies the limit in decisions (Decision.Name); the limiter
	// does not interpret it.
	Name string
	// Key is the budget's identity within the caller's namespace; two
	// limits with equal Scope and Key share one budget, so they must have
	// equal Params. The limiter escapes it into a store key of its own
	// scope, so it never meets a derived limit's key.
	Key []byte
	// Scope is the namespace of Key (its store key's scope); "" is "limit".
	Scope string
	// Params are the limit's algorithm and budget, as configured: the
	// adaptive multiplier scales them as it scales the derived limits.
	Params store.Params
	// Shadow counts the request against the limit but never refuses it.
	Shadow bool
}

// defaultLimitScope is the store key scope of a Limit without one.
const defaultLimitScope = "limit"

// withLimits returns the specs of req: base (the derived limits) followed
// by one per req.Limits, appended in base's room (nextSpec: a decision's
// pooled array, which allocates only past maxLocalSpecs).
func (l *Limiter) withLimits(base []spec, req *Request, mult float64) []spec {
	out := base
	for i := range req.Limits {
		lim := &req.Limits[i]
		var s *spec
		out, s = nextSpec(out)
		s.scope, s.shadow, s.params, s.name = ScopeLimit, lim.Shadow, catalog.Scale(lim.Params, mult), lim.Name
		scope := lim.Scope
		if scope == "" {
			scope = defaultLimitScope
		}
		s.setKey(store.AppendKey(s.buf[:0], "", scope, lim.Key))
		l.finish(s, req)
	}
	return out
}
