package gateway

import (
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/proxy"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// routing is a reload's next routes, upstream pools and adaptive section,
// built and checked but not yet serving.
type routing struct {
	adaptive  *adaptive.Update
	upstreams *upstream.Update
	table     *proxy.Table
}

// stageRouting builds next's routing: the adaptive section's tunables and
// limiters, the pools (unchanged ones kept) and the route table bound to
// them. Nothing serves from it until commitRouting; on an error nothing
// has changed.
func (a *Gateway) stageRouting(next *Config) (*routing, error) {
	au, err := a.adaptive.Stage(next.Adaptive, slices.Sorted(maps.Keys(next.Upstreams)))
	if err != nil {
		return nil, err
	}
	uu, err := a.upstreams.Stage(next.Upstreams)
	if err != nil {
		return nil, err
	}
	t, err := a.proxy.NewTable(next.Proxy.Routes, proxy.Bindings{Upstreams: uu, Limits: au})
	if err != nil {
		uu.Abort()
		return nil, err
	}
	return &routing{adaptive: au, upstreams: uu, table: t}, nil
}

// abort drops a staged routing.
func (r *routing) abort() { r.upstreams.Abort() }

// commitRouting makes r serve: the limiters first, then the route table
// that binds them, then the pools, whose replaced and removed ones retire
// once their requests have finished.
func (a *Gateway) commitRouting(r *routing, next *Config) {
	r.adaptive.Commit()
	a.proxy.SetTable(r.table)
	r.upstreams.Commit()
	a.catalog.SetRouteResources(routeResources(next.Proxy.Routes))
	a.cfg.Proxy.Routes, a.cfg.Upstreams = next.Proxy.Routes, next.Upstreams
	a.cfg.Adaptive = next.Adaptive.KeepRestartKeys(a.cfg.Adaptive)
	u := r.upstreams
	slog.Info("routes and upstreams reloaded", "routes", len(next.Proxy.Routes),
		"upstreams_kept", strings.Join(u.Kept, ","), "upstreams_added", strings.Join(u.Added, ","),
		"upstreams_replaced", strings.Join(u.Replaced, ","), "upstreams_removed", strings.Join(u.Removed, ","))
}

// routeResources are the resources of routes, in order.
func routeResources(routes []proxy.Route) []string {
	out := make([]string, 0, len(routes))
	for _, r := range routes {
		out = append(out, r.Resource)
	}
	return out
}
