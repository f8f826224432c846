package proxy

import (
	"errors"
	"fmt"
	"time"
)

// Bindings resolve the names a route table refers to: Upstreams (or
// Pools) the pools, Limits the concurrency limiters. A reload passes the
// staged *upstream.Update and *adaptive.Update, so that the new table
// binds the pools and limiters it will serve with.
type Bindings struct {
	Upstreams Upstreams
	// Limits gives the upstreams' concurrency limiters (nil: none).
	Limits Limits
	// Pools, when set, replaces Upstreams' lookup (tests; a nil Doer
	// means "unknown").
	Pools func(name string) Doer
}

// NewTable compiles routes (of a provisioned section: Config.SetDefaults,
// Config.Validate) and binds each one to its upstream's pool, the pool's
// timeout and the upstream's concurrency limiter. A route that names no
// pool is an error, and nothing is built. The table serves once SetTable
// publishes it.
func (s *Server) NewTable(routes []Route, b Bindings) (*Table, error) {
	if b.Upstreams == nil && b.Pools == nil {
		return nil, errors.New("proxy: a route table needs the upstream pools")
	}
	t := compileRoutes(routes)
	for i, r := range t.all {
		if err := r.bind(b); err != nil {
			return nil, fmt.Errorf("routes[%d].upstream: %w", i, err)
		}
	}
	return t, nil
}

// bind resolves r's pool, body timeout and concurrency limit.
func (r *route) bind(b Bindings) error {
	if b.Pools != nil {
		r.pool = b.Pools(r.Upstream)
	} else if p := b.Upstreams.Pool(r.Upstream); p != nil {
		r.pool = p
	}
	if r.pool == nil {
		return fmt.Errorf("%q names no upstream pool", r.Upstream)
	}
	if t, ok := r.pool.(interface{ Timeout() time.Duration }); ok {
		r.bodyTimeout = t.Timeout()
	}
	if b.Limits != nil {
		if l := b.Limits.Concurrency(r.Upstream); l != nil {
			r.conc, r.concRoute = l, l.Route(r.Resource)
		}
	}
	return nil
}

// SetTable publishes t: the next request is routed on it, and a request in
// flight finishes on the table (pool, limiter, metrics) it started with.
// t's routes get their metrics first; the series of the resources that
// only the previous table had are unregistered (a request still in flight
// on such a route is counted but no longer exported). t must come from
// NewTable and be published once.
func (s *Server) SetTable(t *Table) {
	s.tableMu.Lock()
	defer s.tableMu.Unlock()
	inUse := make(map[string]bool)
	for _, n := range s.noRoute.names {
		inUse[n] = true
	}
	for _, r := range t.all {
		r.metrics = newRouteMetrics(s.set, r.Resource)
		for _, n := range r.metrics.names {
			inUse[n] = true
		}
	}
	old := s.table.Swap(t)
	if old == nil {
		return
	}
	for _, r := range old.all {
		for _, n := range r.metrics.names {
			if !inUse[n] {
				s.set.UnregisterMetric(n)
			}
		}
	}
}
