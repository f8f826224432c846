package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// withUpstream adds the pool name with target to the proxy's upstreams.
func withUpstream(name, target string) proxyOpt {
	return func(_ *Deps, u *upstream.Config) {
		(*u)[name] = upstream.PoolConfig{Targets: []string{target}, Timeout: 2 * time.Second}
	}
}

// swap builds and publishes a table of routes over b.
func (p *testProxy) swap(t *testing.T, b Bindings, routes ...Route) {
	t.Helper()
	tab, err := p.srv.NewTable(provisioned(Config{Routes: routes}).Routes, b)
	require.NoError(t, err)
	p.srv.SetTable(tab)
}

// TestTableSwapInFlightFinishesOnOldUpstream: a request in flight when the
// table changes completes against the upstream it started with; the next
// request takes the new route.
func TestTableSwapInFlightFinishesOnOldUpstream(t *testing.T) {
	a, b := startBackend(t), startBackend(t)
	p := startProxy(t, a.url, withUpstream("b", b.url))
	done := make(chan int, 1)
	go func() {
		resp, _ := get(t, p.url+"/sleep/300ms")
		done <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return p.set.Pool("api").Pending() == 1 }, 5*time.Second, time.Millisecond)

	p.swap(t, Bindings{Upstreams: p.set}, Route{PathPrefix: "/", Upstream: "b", Resource: "default"})
	resp, _ := get(t, p.url+"/next")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 1, b.hits.Load(), "the new request reached the new upstream")
	assert.EqualValues(t, 0, a.hits.Load(), "the old request is still in flight")

	assert.Equal(t, http.StatusOK, <-done)
	assert.EqualValues(t, 1, a.hits.Load(), "the request in flight finished on the old upstream")
	assert.EqualValues(t, 1, b.hits.Load())
}

// TestTableBindsStagedUpstreams: a table built on a staged upstream update
// binds the kept pool itself (same object) and the new pool; nothing
// routes to them before SetTable.
func TestTableBindsStagedUpstreams(t *testing.T) {
	a, c := startBackend(t), startBackend(t)
	p := startProxy(t, a.url)
	kept := p.set.Pool("api")
	next := upstream.Config{
		"api": {Targets: []string{a.url}, Timeout: 2 * time.Second},
		"c":   {Targets: []string{c.url}, Timeout: 2 * time.Second},
	}
	next.SetDefaults()
	u, err := p.set.Stage(next)
	require.NoError(t, err)
	require.Equal(t, []string{"api"}, u.Kept)
	tab, err := p.srv.NewTable(provisioned(Config{Routes: []Route{
		{PathPrefix: "/", Upstream: "api"},
		{PathPrefix: "/c", Upstream: "c", Resource: "c"},
	}}).Routes, Bindings{Upstreams: u})
	require.NoError(t, err)
	assert.Same(t, kept, tab.all[0].pool, "the unchanged upstream's pool is the running one")
	assert.Equal(t, 2*time.Second, tab.all[1].bodyTimeout)
	get(t, p.url+"/c")
	assert.Zero(t, c.hits.Load(), "not routed before SetTable")

	p.srv.SetTable(tab)
	u.Commit()
	resp, _ := get(t, p.url+"/c")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 1, c.hits.Load())
}

// TestNewTableRefusesUnknownUpstream: a route naming no pool is an error
// and the running table stays.
func TestNewTableRefusesUnknownUpstream(t *testing.T) {
	a := startBackend(t)
	p := startProxy(t, a.url)
	running := p.srv.table.Load()
	_, err := p.srv.NewTable([]Route{{PathPrefix: "/", Upstream: "api"}, {PathPrefix: "/x", Upstream: "nope"}},
		Bindings{Upstreams: p.set})
	require.EqualError(t, err, `routes[1].upstream: "nope" names no upstream pool`)
	assert.Same(t, running, p.srv.table.Load())
	resp, _ := get(t, p.url+"/x")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestSetTableUnregistersRemovedRoutes: a resource no route has any more
// loses its series; a kept one keeps counting; a new one has its series.
func TestSetTableUnregistersRemovedRoutes(t *testing.T) {
	a := startBackend(t)
	p := startProxy(t, a.url)
	const heavy = `sentinel_http_requests_total{route="heavy",code="200"}`
	const fresh = `sentinel_http_requests_total{route="fresh",code="200"}`
	const def = `sentinel_http_requests_total{route="default",code="200"}`
	get(t, p.url+"/")
	require.Contains(t, p.srv.set.ListMetricNames(), heavy)
	before := p.srv.set.GetOrCreateCounter(def).Get()

	p.swap(t, Bindings{Upstreams: p.set},
		Route{PathPrefix: "/", Upstream: "api", Resource: "default"},
		Route{PathPrefix: "/fresh", Upstream: "api", Resource: "fresh"})
	names := p.srv.set.ListMetricNames()
	assert.NotContains(t, names, heavy)
	assert.Contains(t, names, fresh)
	assert.Contains(t, names, `sentinel_http_requests_total{route="none",code="404"}`, "the no-route series stay")
	get(t, p.url+"/")
	assert.Equal(t, before+1, p.srv.set.GetOrCreateCounter(def).Get(), "a kept route keeps counting")
}

// TestTableBindsStagedLimits: a table built on a staged adaptive update
// binds its limiters.
func TestTableBindsStagedLimits(t *testing.T) {
	a := startBackend(t)
	ctl, err := adaptive.New(provisionedAdaptive(adaptive.Config{}), adaptive.Options{PodID: "t", Upstreams: []string{"api"}})
	require.NoError(t, err)
	t.Cleanup(ctl.Stop)
	p := startProxy(t, a.url, func(d *Deps, _ *upstream.Config) { d.Adaptive = ctl })
	require.Same(t, ctl.Concurrency("api"), p.srv.table.Load().all[0].conc)

	u, err := ctl.Stage(provisionedAdaptive(adaptive.Config{Concurrency: adaptive.ConcurrencyConfig{MaxLimit: 7, InitialLimit: 5}}), []string{"api"})
	require.NoError(t, err)
	u.Commit()
	p.swap(t, Bindings{Upstreams: p.set, Limits: u}, Route{PathPrefix: "/", Upstream: "api"})
	l := ctl.Concurrency("api")
	assert.Same(t, l, p.srv.table.Load().all[0].conc)
	assert.EqualValues(t, 5, l.Limit())

	// Each resource has its own latency baseline in the limiter; routes
	// that share a resource share it.
	p.swap(t, Bindings{Upstreams: p.set, Limits: u},
		Route{PathPrefix: "/a", Upstream: "api", Resource: "a"},
		Route{PathPrefix: "/b", Upstream: "api", Resource: "b"},
		Route{PathPrefix: "/a2", Upstream: "api", Resource: "a"})
	keys := map[string]adaptive.Route{}
	for _, r := range p.srv.table.Load().all {
		keys[r.PathPrefix] = r.concRoute
	}
	assert.NotEqual(t, keys["/a"], keys["/b"])
	assert.Equal(t, keys["/a"], keys["/a2"])
	assert.Equal(t, l.Route("b"), keys["/b"])
}

// TestTableSwapUnderLoad swaps tables between two upstreams while clients
// send: every request is answered 200 by one of them.
func TestTableSwapUnderLoad(t *testing.T) {
	a, b := startBackend(t), startBackend(t)
	p := startProxy(t, a.url, withUpstream("b", b.url))
	stop := make(chan struct{})
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, _ := get(t, p.url+"/x"); resp.StatusCode != http.StatusOK {
					bad.Add(1)
				}
			}
		})
	}
	for i := range 200 {
		name := []string{"api", "b"}[i%2]
		p.swap(t, Bindings{Upstreams: p.set}, Route{PathPrefix: "/", Upstream: name, Resource: "r" + name})
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, bad.Load())
	assert.Positive(t, a.hits.Load())
	assert.Positive(t, b.hits.Load())
}
