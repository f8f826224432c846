package e2e

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// routingConfig has the upstreams one and two, with health checks, and the
// given routes and adaptive section.
func routingConfig(one, two, routes, adaptive string) string {
	return `
server: {admin_listen: "127.0.0.1:0", admin_token: s3cret}
limits: {ip: 1000000, window: 1m}
upstreams:
  one: {targets: ["` + one + `"], max_idle_conn_duration: 300ms, health_check: {path: /healthz, interval: 100ms, timeout: 50ms}}
  two: {targets: ["` + two + `"], max_idle_conn_duration: 300ms, health_check: {path: /healthz, interval: 100ms, timeout: 50ms}}
routes:
` + routes + `
adaptive:
` + adaptive + "\n"
}

func reloadFile(t *testing.T, g *harness.Gateway, config string) harness.Answer {
	t.Helper()
	require.NoError(t, os.WriteFile(g.Path, []byte(config), 0o600))
	return harness.Do(t, "POST", g.Admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
}

// TestReloadRoutesUpstreamsAndAdaptive: routes move, a route is added, an
// unchanged upstream keeps its pool, the adaptive thresholds apply and its
// sample interval is reported as needing a restart; a route naming an
// unknown upstream is refused and the running routes stay.
func TestReloadRoutesUpstreamsAndAdaptive(t *testing.T) {
	one, two := harness.StartUpstream(t), harness.StartUpstream(t)
	g := harness.Start(t, routingConfig(one.URL, two.URL, "  - {path_prefix: /, upstream: one}", "  thresholds: {moderate: 0.5}"))
	require.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status)
	require.Equal(t, 1, int(one.Hits()))
	gen := harness.Scrape(t, g.Admin, "sentinel_config_generation")

	a := reloadFile(t, g, routingConfig(one.URL, two.URL,
		"  - {path_prefix: /, upstream: two}\n  - {path_prefix: /one, upstream: one, resource: one}",
		"  thresholds: {moderate: 0.4}\n  sample_interval: 50ms"))
	require.Equal(t, 200, a.Status, "%s", a.Body)
	assert.Equal(t, []any{"adaptive.thresholds.moderate", "routes"}, a.JSON(t)["applied"])
	assert.Equal(t, []any{"adaptive.sample_interval"}, a.JSON(t)["restart_required"])
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status)
	assert.Equal(t, 1, int(two.Hits()), "the moved route reaches the second upstream")
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/one/y", "").Status)
	assert.Equal(t, 2, int(one.Hits()), "the added route reaches the first upstream")
	assert.Equal(t, gen+1, harness.Scrape(t, g.Admin, "sentinel_config_generation"))
	assert.Positive(t, harness.Scrape(t, g.Admin, "sentinel_http_requests_total", "route", "one"))

	a = reloadFile(t, g, routingConfig(one.URL, two.URL, "  - {path_prefix: /, upstream: ghost}", ""))
	assert.Equal(t, 400, a.Status)
	assert.Contains(t, string(a.Body), `routes[0].upstream: \"ghost\" is not a configured upstream`)
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status)
	assert.Equal(t, 2, int(two.Hits()), "the running routes stay")
	assert.Equal(t, gen+1, harness.Scrape(t, g.Admin, "sentinel_config_generation"))
	assert.Zero(t, harness.Scrape(t, g.Admin, "sentinel_config_last_reload_successful"))
}

// interesting are the goroutines a reload starts per pool or retirement,
// counted by a frame of their stacks.
var interesting = []string{"upstream.(*watcher).run", "upstream.(*Set).retire", "fasthttp.(*HostClient).connsCleaner"}

func goroutinesWith() map[string]int {
	buf := make([]byte, 1<<22)
	stacks := string(buf[:runtime.Stack(buf, true)])
	out := map[string]int{}
	for _, f := range interesting {
		out[f] = strings.Count(stacks, f+"(")
	}
	return out
}

// TestReloadStormUnderLoad reloads 60 times while clients send: the
// routes alternate between the upstreams, whose pools are replaced on
// every reload (their timeout changes), a third upstream is renamed each
// time, and the concurrency bounds change.
// (The pressure counts upstream errors only: a -race run on a small box
// would otherwise shed by CPU, which is the adaptive layer's job, not a
// reload's fault.)
// No request fails, and once the retired pools are closed the health
// checkers, retirements and connection cleaners are back to what one
// configuration runs: nothing leaks.
func TestReloadStormUnderLoad(t *testing.T) {
	one, two := harness.StartUpstream(t), harness.StartUpstream(t)
	config := func(i int) string {
		c := routingConfig(one.URL, two.URL, "  - {path_prefix: /, upstream: "+[]string{"one", "two"}[i%2]+"}",
			fmt.Sprintf("  weights: {upstream_errors: 1}\n  concurrency: {max_limit: %d}", 1000+i%2))
		c = strings.ReplaceAll(c, "max_idle_conn_duration", fmt.Sprintf("timeout: %ds, max_idle_conn_duration", 10+i%2))
		// A third upstream takes a new name each time: one removed, one added.
		return strings.Replace(c, "upstreams:\n", fmt.Sprintf("upstreams:\n  gone%d: {targets: [%q]}\n", i, one.URL), 1)
	}
	g := harness.Start(t, config(0))
	require.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status)
	harness.Client.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	before, total := goroutinesWith(), runtime.NumGoroutine()

	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var codes sync.Map
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if code, body := fetch(g.URL + "/x"); code != http.StatusOK {
					failed.Add(1)
					codes.Store(code, body)
				}
			}
		})
	}
	for i := 1; i <= 60; i++ {
		require.NoError(t, os.WriteFile(g.Path, []byte(config(i)), 0o600))
		applied, _, err := g.Reload()
		require.NoError(t, err)
		require.Contains(t, applied, "upstreams")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Positive(t, goroutinesWith()["upstream.(*Set).retire"], "retired pools wait for their requests")
	close(stop)
	wg.Wait()
	var bad []any
	codes.Range(func(k, v any) bool { bad = append(bad, k, v); return true })
	assert.Zero(t, failed.Load(), "of %d requests; codes %v", sent.Load(), bad)
	assert.Equal(t, []string{"gone60", "one", "two"}, upstreamNames(t, g))

	harness.Client.CloseIdleConnections()
	harness.Eventually(t, 10*time.Second, "the retired pools' goroutines end", func() bool {
		now := goroutinesWith()
		for _, f := range interesting {
			if now[f] > before[f] {
				return false
			}
		}
		return true
	})
	assert.LessOrEqual(t, runtime.NumGoroutine(), total+20, "goroutines before the storm: %d", total)
	assert.Equal(t, 1, countSeries(t, g.Admin, `sentinel_upstream_latency_seconds_count{upstream="gone`),
		"the removed upstreams' series are gone, the last one's is there")
	t.Logf("%d requests during 60 reloads; goroutines %v before, %v after", sent.Load(), before, goroutinesWith())
}

// fetch GETs url and returns the status and body; 0 and the error on a
// transport error (for load loops off the test's goroutine).
func fetch(url string) (int, string) {
	resp, err := harness.Client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// countSeries counts the samples on /metrics that start with prefix.
func countSeries(t *testing.T, admin, prefix string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(string(harness.Do(t, "GET", admin+"/metrics", "").Body), "\n") {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// upstreamNames lists the upstreams g serves: those its adaptive
// controller keeps a concurrency limit for (/v1/state).
func upstreamNames(t *testing.T, g *harness.Gateway) []string {
	t.Helper()
	ups, _ := g.State(t, "adaptive")["upstreams"].(map[string]any)
	return slices.Sorted(maps.Keys(ups))
}
