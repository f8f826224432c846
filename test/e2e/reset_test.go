package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestCounterResetAcrossPods: three gateways on one redis-server spend an
// API key's budget and another's; DELETE /v1/counters on one of them lets
// every pod admit the first key again within a second, while the other key
// stays refused everywhere.
func TestCounterResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, api_key: 6, tenant: 1000, window: 1m, store_timeout: 2s}\n", srv.Addr))
	pods := []*harness.Gateway{harness.Start(t, cfg), harness.Start(t, cfg), harness.Start(t, cfg)}
	spend := func(key string) {
		for _, g := range pods {
			for i := 0; harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", key).Status == http.StatusOK; i++ {
				require.Less(t, i, 10, "the budget of %s ends", key)
			}
		}
	}
	spend("hot-key")
	spend("gold-key")
	before := harness.Scrape(t, pods[0].Admin, "sentinel_limit_resets_total", "scope", "api_key")

	a := harness.Do(t, "DELETE", pods[0].Admin+"/v1/counters?scope=api_key&key=hot-key", "")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	reset := time.Now()
	for i, g := range pods {
		took := harness.Eventually(t, time.Second, fmt.Sprintf("pod %d admits the key", i), func() bool {
			return harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "hot-key").Status == http.StatusOK
		})
		t.Logf("pod %d admits again %v after the reset's answer", i, took.Round(time.Millisecond))
		assert.Equal(t, http.StatusTooManyRequests, harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key").Status, "pod %d: another key keeps its counts", i)
	}
	assert.Less(t, time.Since(reset), 3*time.Second)
	assert.Equal(t, before+1, harness.Scrape(t, pods[0].Admin, "sentinel_limit_resets_total", "scope", "api_key"))
}

// TestCounterResetReachesEveryPod: a token bucket that never refills is
// refused from each pod's cache for a second; a reset through one pod
// drops that cache on every pod at once (the reset's message), so each
// admits well within the second.
func TestCounterResetReachesEveryPod(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr))
	pods := []*harness.Gateway{harness.Start(t, cfg), harness.Start(t, cfg), harness.Start(t, cfg)}
	a := harness.Do(t, "PUT", pods[0].Admin+"/v1/rules/gold/default", `{"algorithm":"token_bucket","capacity":3,"refill_rate":0}`)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	for i, g := range pods {
		harness.Eventually(t, time.Second, fmt.Sprintf("the rule on pod %d", i), func() bool {
			return harness.Do(t, "GET", g.Admin+"/v1/rules/gold/default", "").Status == http.StatusOK
		})
	}
	for _, g := range pods {
		for i := 0; harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key").Status == http.StatusOK; i++ {
			require.Less(t, i, 5, "the bucket empties")
		}
	}
	a = harness.Do(t, "DELETE", pods[1].Admin+"/v1/counters?scope=rule&key=gold/default", "")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	for i, g := range pods {
		took := harness.Eventually(t, time.Second, fmt.Sprintf("pod %d admits", i), func() bool {
			return harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key").Status == http.StatusOK
		})
		t.Logf("pod %d admits %v after the reset's answer", i, took.Round(time.Millisecond))
		assert.Less(t, took, 500*time.Millisecond, "pod %d dropped its cached refusal", i)
	}
}

// TestRateLimitHeadersListEveryLimit: a proxied answer, a 429 and a check
// API answer list every limit that applied in RateLimit-Policy (a rule
// without a refill has no w) and give the most restrictive one's r and t,
// t within its window, as X-RateLimit-* does.
func TestRateLimitHeadersListEveryLimit(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "limits: {ip: 50, tenant: 100, window: 10s}\n"+
		"rules:\n  - {tenant: gold, resource: default, algorithm: token_bucket, capacity: 2, refill_rate: 0}\n"))
	a := harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.Equal(t, `"rule";q=2, "tenant";q=300;w=10, "ip";q=50;w=10`, a.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"rule";r=1`, a.Header.Get("RateLimit"), "a bucket that never refills: no t")
	assert.Equal(t, "1", a.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key").Status)
	a = harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "gold-key")
	require.Equal(t, http.StatusTooManyRequests, a.Status)
	assert.Equal(t, `"rule";q=2, "tenant";q=300;w=10, "ip";q=50;w=10`, a.Header.Get("RateLimit-Policy"),
		"a refusal lists the same limits: the refusing one and those after it")
	assert.Equal(t, `"rule";r=0`, a.Header.Get("RateLimit"))

	a = harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "hot-key")
	require.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, `"tenant";q=100;w=10, "ip";q=50;w=10`, a.Header.Get("RateLimit-Policy"))
	assert.Regexp(t, `^"ip";r=4[0-9];t=([1-9]|10)$`, a.Header.Get("RateLimit"), "the IP has spent the most")
	a = harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", `{"tenant_id":"hot","resource":"default","key":"k"}`)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.Equal(t, `"tenant";q=100;w=10`, a.Header.Get("RateLimit-Policy"))
	assert.Regexp(t, `^"tenant";r=9[0-9];t=([1-9]|10)$`, a.Header.Get("RateLimit"))
}

// TestPolicyResetAcrossPods: three gateways on one redis-server spend a
// policy's budgets (a window and a day's quota, keyed by API key and a
// header) for two users; DELETE /v1/counters?policy= on one pod, the key's
// values in the policy's order, lets every pod admit the first user again
// within a second, while the second stays refused everywhere.
func TestPolicyResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr)+
		"policies:\n  - {name: per-user, key: [api_key, header:X-User], limits: [{limit: 9, window: 1m}, {limit: 4, period: day}]}\n")
	pods := []*harness.Gateway{harness.Start(t, cfg), harness.Start(t, cfg), harness.Start(t, cfg)}
	get := func(g *harness.Gateway, user string) int {
		return harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "hot-key", "X-User", user).Status
	}
	for _, user := range []string{"u1", "u2"} {
		for _, g := range pods {
			for i := 0; get(g, user) == http.StatusOK; i++ {
				require.Less(t, i, 10, "the budget of %s ends", user)
			}
		}
	}
	before := harness.Scrape(t, pods[0].Admin, "sentinel_limit_resets_total", "scope", "policy")

	a := harness.Do(t, "DELETE", pods[0].Admin+"/v1/counters?policy=per-user&key=hot-key&key=u1", "")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.JSONEq(t, `{"policy":"per-user","key":["hot-key","u1"],"limits":["1m","day"]}`, string(a.Body))
	for i, g := range pods {
		took := harness.Eventually(t, time.Second, fmt.Sprintf("pod %d admits u1", i), func() bool { return get(g, "u1") == http.StatusOK })
		t.Logf("pod %d admits u1 again %v after the reset's answer", i, took.Round(time.Millisecond))
		assert.Equal(t, http.StatusTooManyRequests, get(g, "u2"), "pod %d: another user keeps its counts", i)
	}
	assert.Equal(t, before+1, harness.Scrape(t, pods[0].Admin, "sentinel_limit_resets_total", "scope", "policy"))
	a = harness.Do(t, "DELETE", pods[1].Admin+"/v1/counters?policy=per-user&key=hot-key", "")
	assert.Equal(t, http.StatusBadRequest, a.Status, "one value for a key of two: %s", a.Body)
	a = harness.Do(t, "DELETE", pods[1].Admin+"/v1/counters?policy=per-day&key=x", "")
	assert.Equal(t, http.StatusNotFound, a.Status, "%s", a.Body)
}
