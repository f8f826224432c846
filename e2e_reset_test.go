package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestCounterResetAcrossPods: three gateways on one redis-server spend an
// API key's budget and another's; DELETE /v1/counters on one of them lets
// every pod admit the first key again within a second, while the other key
// stays refused everywhere.
func TestCounterResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	cfg := testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, api_key: 6, tenant: 1000, window: 1m, store_timeout: 2s}\n", srv.Addr))
	pods := []*gateway{startGateway(t, cfg), startGateway(t, cfg), startGateway(t, cfg)}
	spend := func(key string) {
		for _, g := range pods {
			for i := 0; do(t, "GET", g.url+"/x", "", "X-API-Key", key).status == http.StatusOK; i++ {
				require.Less(t, i, 10, "the budget of %s ends", key)
			}
		}
	}
	spend("hot-key")
	spend("gold-key")
	before := scrape(t, pods[0].admin, "sentinel_limit_resets_total", "scope", "api_key")

	a := do(t, "DELETE", pods[0].admin+"/v1/counters?scope=api_key&key=hot-key", "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	reset := time.Now()
	for i, g := range pods {
		took := eventually(t, time.Second, fmt.Sprintf("pod %d admits the key", i), func() bool {
			return do(t, "GET", g.url+"/x", "", "X-API-Key", "hot-key").status == http.StatusOK
		})
		t.Logf("pod %d admits again %v after the reset's answer", i, took.Round(time.Millisecond))
		assert.Equal(t, http.StatusTooManyRequests, do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key").status, "pod %d: another key keeps its counts", i)
	}
	assert.Less(t, time.Since(reset), 3*time.Second)
	assert.Equal(t, before+1, scrape(t, pods[0].admin, "sentinel_limit_resets_total", "scope", "api_key"))
}

// TestCounterResetReachesEveryPod: a token bucket that never refills is
// refused from each pod's cache for a second; a reset through one pod
// drops that cache on every pod at once (the reset's message), so each
// admits well within the second.
func TestCounterResetReachesEveryPod(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	cfg := testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr))
	pods := []*gateway{startGateway(t, cfg), startGateway(t, cfg), startGateway(t, cfg)}
	a := do(t, "PUT", pods[0].admin+"/v1/rules/gold/default", `{"algorithm":"token_bucket","capacity":3,"refill_rate":0}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	for i, g := range pods {
		eventually(t, time.Second, fmt.Sprintf("the rule on pod %d", i), func() bool {
			return do(t, "GET", g.admin+"/v1/rules/gold/default", "").status == http.StatusOK
		})
	}
	for _, g := range pods {
		for i := 0; do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key").status == http.StatusOK; i++ {
			require.Less(t, i, 5, "the bucket empties")
		}
	}
	a = do(t, "DELETE", pods[1].admin+"/v1/counters?scope=rule&key=gold/default", "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	for i, g := range pods {
		took := eventually(t, time.Second, fmt.Sprintf("pod %d admits", i), func() bool {
			return do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key").status == http.StatusOK
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
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, "limits: {ip: 50, tenant: 100, window: 10s}\n"+
		"rules:\n  - {tenant: gold, resource: default, algorithm: token_bucket, capacity: 2, refill_rate: 0}\n"))
	a := do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, `"rule";q=2, "tenant";q=300;w=10, "ip";q=50;w=10`, a.header.Get("RateLimit-Policy"))
	assert.Equal(t, `"rule";r=1`, a.header.Get("RateLimit"), "a bucket that never refills: no t")
	assert.Equal(t, "1", a.header.Get("X-RateLimit-Remaining"))
	require.Equal(t, http.StatusOK, do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key").status)
	a = do(t, "GET", g.url+"/x", "", "X-API-Key", "gold-key")
	require.Equal(t, http.StatusTooManyRequests, a.status)
	assert.Equal(t, `"rule";q=2, "tenant";q=300;w=10, "ip";q=50;w=10`, a.header.Get("RateLimit-Policy"),
		"a refusal lists the same limits: the refusing one and those after it")
	assert.Equal(t, `"rule";r=0`, a.header.Get("RateLimit"))

	a = do(t, "GET", g.url+"/x", "", "X-API-Key", "hot-key")
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, `"tenant";q=100;w=10, "ip";q=50;w=10`, a.header.Get("RateLimit-Policy"))
	assert.Regexp(t, `^"ip";r=4[0-9];t=([1-9]|10)$`, a.header.Get("RateLimit"), "the IP has spent the most")
	a = do(t, "POST", g.admin+"/v1/ratelimit/check", `{"tenant_id":"hot","resource":"default","key":"k"}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, `"tenant";q=100;w=10`, a.header.Get("RateLimit-Policy"))
	assert.Regexp(t, `^"tenant";r=9[0-9];t=([1-9]|10)$`, a.header.Get("RateLimit"))
}

// TestPolicyResetAcrossPods: three gateways on one redis-server spend a
// policy's budgets (a window and a day's quota, keyed by API key and a
// header) for two users; DELETE /v1/counters?policy= on one pod, the key's
// values in the policy's order, lets every pod admit the first user again
// within a second, while the second stays refused everywhere.
func TestPolicyResetAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	cfg := testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr)+
		"policies:\n  - {name: per-user, key: [api_key, header:X-User], limits: [{limit: 9, window: 1m}, {limit: 4, period: day}]}\n")
	pods := []*gateway{startGateway(t, cfg), startGateway(t, cfg), startGateway(t, cfg)}
	get := func(g *gateway, user string) int {
		return do(t, "GET", g.url+"/x", "", "X-API-Key", "hot-key", "X-User", user).status
	}
	for _, user := range []string{"u1", "u2"} {
		for _, g := range pods {
			for i := 0; get(g, user) == http.StatusOK; i++ {
				require.Less(t, i, 10, "the budget of %s ends", user)
			}
		}
	}
	before := scrape(t, pods[0].admin, "sentinel_limit_resets_total", "scope", "policy")

	a := do(t, "DELETE", pods[0].admin+"/v1/counters?policy=per-user&key=hot-key&key=u1", "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.JSONEq(t, `{"policy":"per-user","key":["hot-key","u1"],"limits":["1m0s","day"]}`, string(a.body))
	for i, g := range pods {
		took := eventually(t, time.Second, fmt.Sprintf("pod %d admits u1", i), func() bool { return get(g, "u1") == http.StatusOK })
		t.Logf("pod %d admits u1 again %v after the reset's answer", i, took.Round(time.Millisecond))
		assert.Equal(t, http.StatusTooManyRequests, get(g, "u2"), "pod %d: another user keeps its counts", i)
	}
	assert.Equal(t, before+1, scrape(t, pods[0].admin, "sentinel_limit_resets_total", "scope", "policy"))
	a = do(t, "DELETE", pods[1].admin+"/v1/counters?policy=per-user&key=hot-key", "")
	assert.Equal(t, http.StatusBadRequest, a.status, "one value for a key of two: %s", a.body)
	a = do(t, "DELETE", pods[1].admin+"/v1/counters?policy=per-day&key=x", "")
	assert.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
}
