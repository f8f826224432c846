package main

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPipelinedUpstream sends GETs from many clients through a pool with
// pipeline: 1 (a net/http backend, which answers pipelined requests one
// after another): each client gets the answer to its own request with the
// gateway's headers, a cacheable answer is cached, and a POST takes a
// connection of its own.
func TestPipelinedUpstream(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
# read_timeout: the shutdown at the end waits for connections that the
# test's client opened but never used, until they time out.
server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", read_timeout: 1s}
tenants: [{id: acme, plan: PREMIUM, api_keys: [k-1]}]
upstreams:
  api: {targets: [%q], pipeline: 1}
routes:
  - {path_prefix: /cached, upstream: api, cache_ttl: 1m}
  - {path_prefix: /, upstream: api}
limits: {tenant: 100000}
`, up.url))

	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				path := fmt.Sprintf("/c%d/r%d", c, i)
				a := do(t, "GET", g.url+path, "", "X-API-Key", "k-1")
				assert.Equal(t, http.StatusOK, a.status)
				assert.Equal(t, fmt.Sprintf(`{"path":%q}`, path), string(a.body))
				assert.NotEmpty(t, a.header.Get("X-RateLimit-Remaining"))
			}
		}()
	}
	wg.Wait()
	// (idle, stalled: alone in flight, or after an answer slower than 20 ms,
	// which a loaded machine may produce, a request takes a connection of
	// its own; the first pipelined one is a probe.)
	pipelined := scrape(t, g.admin, "sentinel_upstream_pipeline_requests_total", "target", up.url, "path", "pipelined")
	assert.EqualValues(t, 200, scrape(t, g.admin, "sentinel_upstream_pipeline_requests_total", "target", up.url))
	assert.Positive(t, pipelined)

	a := do(t, "POST", g.url+"/form", "a=1", "X-API-Key", "k-1")
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, `{"path":"/form"}`, string(a.body))
	assert.Equal(t, pipelined, scrape(t, g.admin, "sentinel_upstream_pipeline_requests_total", "target", up.url, "path", "pipelined"), "a POST is not pipelined")

	stores := scrape(t, g.admin, "sentinel_cache_stores_total")
	a = do(t, "GET", g.url+"/cached/x", "") // no credentials: a shared answer
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, stores+1, scrape(t, g.admin, "sentinel_cache_stores_total"), "a pipelined answer is read whole: the cache keeps it")
	assert.Equal(t, 202, up.count())
	assert.Zero(t, scrape(t, g.admin, "sentinel_upstream_pipeline_requests_total", "target", up.url, "path", "resent"))
}
