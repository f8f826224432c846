package faults

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestFaultStartDuringOutage starts a gateway whose Redis is down: it starts
// after redis.connect_wait instead of exiting, is ready, and serves under
// the local share of limits.expected_pods (never more than its share). Once
// Redis comes up it attaches without a restart: the permits it let through
// alone count in the store's window, a tenant and a rule written through
// another pod apply on it, and both pods' decisions together come from the
// store.
func TestFaultStartDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop() // the port stays this test's; the server comes back on it
	up := harness.StartUpstream(t)
	const limitPerMin, expectedPods = 9, 3
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf(`redis: {addrs: [%q], connect_wait: 300ms}
limits: {tenant: 0, ip: 0, api_key: %d, window: 1m, store_timeout: 1s, expected_pods: %d}
`, srv.Addr, limitPerMin, expectedPods))

	started := time.Now()
	a := harness.Start(t, cfg)
	t.Logf("faults: gateway started without redis in %v", time.Since(started).Round(time.Millisecond))
	ready := harness.Do(t, "GET", a.Admin+"/readyz", "")
	assert.Equal(t, http.StatusOK, ready.Status, "a pod that serves with the local share stays ready: %s", ready.Body)
	assert.Contains(t, string(ready.Body), "not connected")

	fallback := harness.Scrape(t, a.Admin, "sentinel_limit_fallback_decisions_total", "policy", "local")
	before := harness.Passed(t, []*harness.Gateway{a}, limitPerMin, "hot-key")
	t.Logf("faults: before redis: %d of %d allowed (limit %d/min, share of %d expected pods: %d)",
		before, limitPerMin, limitPerMin, expectedPods, limitPerMin/expectedPods)
	assert.Equal(t, limitPerMin/expectedPods, before, "the pod takes its share, not the whole limit")
	assert.GreaterOrEqual(t, harness.Scrape(t, a.Admin, "sentinel_limit_fallback_decisions_total", "policy", "local")-fallback,
		float64(limitPerMin), "every decision without the store shows in /metrics")
	assert.Equal(t, 0.0, harness.Scrape(t, a.Admin, "sentinel_redis_connected"))
	harness.Eventually(t, 5*time.Second, "connection attempts counted", func() bool {
		return harness.Scrape(t, a.Admin, "sentinel_redis_connect_failures_total") > 0
	})

	srv.Restart()
	took := harness.Eventually(t, 10*time.Second, "the gateway attaches its redis", func() bool {
		return harness.Scrape(t, a.Admin, "sentinel_redis_connected") == 1
	})
	t.Logf("faults: attached %v after redis came up (%v connection failures before)", took.Round(time.Millisecond),
		harness.Scrape(t, a.Admin, "sentinel_redis_connect_failures_total"))
	ready = harness.Do(t, "GET", a.Admin+"/readyz", "")
	assert.Equal(t, http.StatusOK, ready.Status)
	assert.Contains(t, string(ready.Body), "answers")

	// The permits let through alone count in the store's window, and for
	// one window after deciding alone the pod keeps to its share (as after
	// any outage): the minute holds no more than the limit.
	time.Sleep(300 * time.Millisecond) // the breaker's cooldown: its probe finds the store
	calls := harness.Scrape(t, a.Admin, "sentinel_limit_store_calls_total", "result", "ok")
	after := harness.Passed(t, []*harness.Gateway{a}, limitPerMin, "hot-key")
	t.Logf("faults: after attaching: %d more allowed, %d in the window (limit %d)", after, before+after, limitPerMin)
	assert.LessOrEqual(t, before+after, limitPerMin, "no window admits more than its limit across the attach")
	assert.Greater(t, harness.Scrape(t, a.Admin, "sentinel_limit_store_calls_total", "result", "ok"), calls, "the store answers the pod's calls")

	// A tenant and a rule written through another pod apply on this one,
	// and the two pods together allow exactly the rule's limit.
	b := harness.Start(t, cfg)
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", b.Admin+"/v1/tenants/lateco", `{"plan":"FREE","api_keys":["lateco-key"]}`).Status)
	resp := harness.Do(t, "PUT", b.Admin+"/v1/rules/lateco/default", `{"algorithm":"sliding_window","limit":4,"window":"1m"}`)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	took = harness.Eventually(t, 6*time.Second, "the rule written through pod B applies on pod A", func() bool {
		return harness.Do(t, "GET", a.Admin+"/v1/rules/lateco/default", "").Status == http.StatusOK
	})
	t.Logf("faults: rule written through another pod seen in %v", took.Round(time.Millisecond))
	allowed := harness.Passed(t, []*harness.Gateway{a, b}, 8, "lateco-key")
	t.Logf("faults: rule of 4/min through both pods: %d of 8 allowed", allowed)
	assert.Equal(t, 4, allowed, "the store counts both pods' decisions")
	state := harness.Do(t, "GET", a.Admin+"/v1/state", "")
	assert.True(t, strings.Contains(string(state.Body), `"cluster_view":true`), "the adaptive cluster view attached too: %s", state.Body)
}
