package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestPipelinedUpstream sends GETs from many clients through a pool with
// pipeline: 1 (a net/http backend, which answers pipelined requests one
// after another): each client gets the answer to its own request with the
// gateway's headers, a cacheable answer is cached, and a POST takes a
// connection of its own.
func TestPipelinedUpstream(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, fmt.Sprintf(`
# read_timeout: the shutdown at the end waits for connections that the
# test's client opened but never used, until they time out.
server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", read_timeout: 1s}
# The answers' paths are the point, not the protection: a busy machine
# reads as pressure (Aggressive mode refuses the anonymous GET below) and
# as a queueing upstream (the concurrency limit sheds it).
adaptive: {enabled: false}
tenants: [{id: acme, plan: PREMIUM, api_keys: [k-1]}]
upstreams:
  api: {targets: [%q], pipeline: 1}
routes:
  - {path_prefix: /cached, upstream: api, cache_ttl: 1m}
  - {path_prefix: /, upstream: api}
limits: {tenant: 100000}
`, up.URL))

	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				path := fmt.Sprintf("/c%d/r%d", c, i)
				a := harness.Do(t, "GET", g.URL+path, "", "X-API-Key", "k-1")
				assert.Equal(t, http.StatusOK, a.Status)
				assert.Equal(t, fmt.Sprintf(`{"path":%q}`, path), string(a.Body))
				assert.NotEmpty(t, a.Header.Get("X-RateLimit-Remaining"))
			}
		}()
	}
	wg.Wait()
	// (idle, stalled: alone in flight, or after an answer slower than 20 ms,
	// which a loaded machine may produce, a request takes a connection of
	// its own; the first pipelined one is a probe.)
	pipelined := harness.Scrape(t, g.Admin, "sentinel_upstream_pipeline_requests_total", "target", up.URL, "path", "pipelined")
	assert.EqualValues(t, 200, harness.Scrape(t, g.Admin, "sentinel_upstream_pipeline_requests_total", "target", up.URL))
	assert.Positive(t, pipelined)

	a := harness.Do(t, "POST", g.URL+"/form", "a=1", "X-API-Key", "k-1")
	require.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, `{"path":"/form"}`, string(a.Body))
	assert.Equal(t, pipelined, harness.Scrape(t, g.Admin, "sentinel_upstream_pipeline_requests_total", "target", up.URL, "path", "pipelined"), "a POST is not pipelined")

	stores := harness.Scrape(t, g.Admin, "sentinel_cache_stores_total")
	a = harness.Do(t, "GET", g.URL+"/cached/x", "") // no credentials: a shared answer
	require.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, stores+1, harness.Scrape(t, g.Admin, "sentinel_cache_stores_total"), "a pipelined answer is read whole: the cache keeps it")
	assert.Equal(t, 202, int(up.Hits()))
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_upstream_pipeline_requests_total", "target", up.URL, "path", "resent"))
}
