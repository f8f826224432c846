package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// TestCheckAPISharesTheProxyBudget: decisions through the check API and
// through the proxy count against one budget.
func TestCheckAPISharesTheProxyBudget(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, `
limits: {ip: 0}
rules:
  - {tenant: hot, resource: default, algorithm: sliding_window, limit: 5, window: 1m}
`))
	check := `{"tenant_id":"hot","resource":"default","key":"hot-key","tokens_requested":3}`
	a := do(t, "POST", g.admin+"/v1/ratelimit/check", check, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	body := a.json(t)
	assert.Equal(t, true, body["allowed"])
	assert.EqualValues(t, 2, body["remaining"])
	assert.NotEmpty(t, a.header.Get("RateLimit-Policy"))

	for i := range 2 {
		a = do(t, "GET", g.url+"/x", "", "X-API-Key", "hot-key")
		require.Equal(t, http.StatusOK, a.status, "proxy request %d", i+1)
	}
	a = do(t, "GET", g.url+"/x", "", "X-API-Key", "hot-key")
	require.Equal(t, http.StatusTooManyRequests, a.status)

	a = do(t, "POST", g.admin+"/v1/ratelimit/check", `{"tenant_id":"hot","resource":"default","key":"hot-key"}`)
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, false, a.json(t)["allowed"])
	assert.Greater(t, a.json(t)["retry_after_ms"], 0.0)
}

// TestCheckAPIBadRequests: every malformed check gets 400 naming the field,
// and is not counted.
func TestCheckAPIBadRequests(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, "limits: {ip: 0}\n"))
	before := scrape(t, g.admin, "rate_limit_requests_total")
	cases := []struct{ body, field string }{
		{`{`, "body"},
		{``, "body"},
		{`[]`, "body"},
		{`{"tenant_id":"hot","resource":"default","key":"k","bogus":1}`, "bogus"},
		{`{"resource":"default","key":"k"}`, "tenant_id"},
		{`{"tenant_id":"hot","resource":"default","key":"k","tokens_requested":-4}`, "tokens_requested"},
		{`{"tenant_id":"hot","resource":"default","key":"k","tokens_requested":"3"}`, "tokens_requested"},
		{`{"tenant_id":"nobody","resource":"default","key":"k"}`, "tenant_id"},
		{`{"tenant_id":"hot","resource":"default","key":"k"} {}`, "body"},
		{`{"tenant_id":"hot","resource":"default","key":"` + strings.Repeat("k", 70000) + `"}`, "body"},
	}
	for _, tc := range cases {
		a := do(t, "POST", g.admin+"/v1/ratelimit/check", tc.body)
		require.Equal(t, http.StatusBadRequest, a.status, "body %.60q: %s", tc.body, a.body)
		assert.Equal(t, tc.field, a.json(t)["field"], "body %.60q", tc.body)
	}
	assert.Equal(t, before, scrape(t, g.admin, "rate_limit_requests_total"), "bad checks are not counted")
}

// TestRulesAcrossPods: a rule written through one gateway changes the
// decisions of another within a second, survives restarting both, and
// deleting it restores the default.
func TestRulesAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	// A store call slower than the timeout (a loaded machine under -race)
	// would decide by the local share of this small rule: 1 per pod.
	cfg := testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr))
	a, b := startGateway(t, cfg), startGateway(t, cfg)

	rule := `{"algorithm":"sliding_window","limit":2,"window":"1m"}`
	resp := do(t, "PUT", a.admin+"/v1/rules/gold/default", rule)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	took := eventually(t, 3*time.Second, "rule visible on pod B", func() bool {
		return do(t, "GET", b.admin+"/v1/rules/gold/default", "").status == http.StatusOK
	})
	t.Logf("rule visible on the second pod after %v", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second)
	statuses := []int{}
	for range 3 {
		statuses = append(statuses, do(t, "GET", b.url+"/r", "", "X-API-Key", "gold-key").status)
	}
	assert.Equal(t, []int{200, 200, 429}, statuses, "pod B enforces the rule")

	// Bad rules are refused with the field named.
	for body, field := range map[string]string{
		`{"algorithm":"leaky","limit":2,"window":"1m"}`:          "algorithm",
		`{"algorithm":"sliding_window","limit":0,"window":"1m"}`: "limit",
		`{"algorithm":"sliding_window","limit":2,"window":"x"}`:  "window",
		`{"algorithm":"token_bucket","capacity":0}`:              "capacity",
		`{"algorithm":"token_bucket","capacity":1,"nope":1}`:     "nope",
	} {
		r := do(t, "PUT", a.admin+"/v1/rules/gold/other", body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
		assert.Equal(t, field, r.json(t)["field"], body)
	}

	// Both pods restart: the rule is read back from Redis.
	a.stop()
	b.stop()
	c := startGateway(t, cfg)
	require.Equal(t, http.StatusOK, do(t, "GET", c.admin+"/v1/rules/gold/default", "").status)

	require.Equal(t, http.StatusNoContent, do(t, "DELETE", c.admin+"/v1/rules/gold/default", "").status)
	require.Equal(t, http.StatusNotFound, do(t, "GET", c.admin+"/v1/rules/gold/default", "").status)
	for range 5 {
		require.Equal(t, http.StatusOK, do(t, "GET", c.url+"/r", "", "X-API-Key", "gold-key").status, "default limits again")
	}

	// Tenants are managed the same way: a new customer without a restart.
	require.Equal(t, http.StatusOK, do(t, "PUT", c.admin+"/v1/tenants/newco", `{"plan":"STANDARD","api_keys":["newco-key"]}`).status)
	a2 := do(t, "GET", c.url+"/r", "", "X-API-Key", "newco-key")
	require.Equal(t, http.StatusOK, a2.status)
	assert.NotEmpty(t, a2.header.Get("X-RateLimit-Limit"), "the new tenant is limited as a tenant")
}

// TestAdminAuth: with a token, every endpoint but /healthz and /metrics needs
// it.
func TestAdminAuth(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, "server: {admin_token: s3cret}\n"))
	assert.Equal(t, http.StatusUnauthorized, do(t, "GET", g.admin+"/v1/rules", "").status)
	assert.Equal(t, http.StatusUnauthorized, do(t, "GET", g.admin+"/v1/rules", "", "Authorization", "Bearer wrong").status)
	assert.Equal(t, http.StatusOK, do(t, "GET", g.admin+"/v1/rules", "", "Authorization", "Bearer s3cret").status)
	assert.Equal(t, http.StatusOK, do(t, "GET", g.admin+"/healthz", "").status)
	assert.Equal(t, http.StatusOK, do(t, "GET", g.admin+"/metrics", "").status)
	// The proxy listener never serves admin paths: they go to the upstream.
	a := do(t, "GET", g.url+"/v1/rules", "")
	assert.Equal(t, `{"path":"/v1/rules"}`, string(a.body))
}

// TestMetricsAfterTraffic scrapes /metrics after known traffic.
func TestMetricsAfterTraffic(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, `
limits: {ip: 0}
rules:
  - {tenant: hot, resource: default, algorithm: token_bucket, capacity: 2, refill_rate: 0}
`))
	before := func(name string) float64 { return scrape(t, g.admin, name, "tenant", "hot", "resource", "default") }
	req0, ok0, bl0 := before("rate_limit_requests_total"), before("rate_limit_allowed_total"), before("rate_limit_blocked_total")
	for range 5 {
		do(t, "GET", g.url+"/m", "", "X-API-Key", "hot-key")
	}
	assert.Equal(t, 5.0, before("rate_limit_requests_total")-req0)
	assert.Equal(t, 2.0, before("rate_limit_allowed_total")-ok0)
	assert.Equal(t, 3.0, before("rate_limit_blocked_total")-bl0)
	text := string(do(t, "GET", g.admin+"/metrics", "").body)
	for _, name := range []string{
		"rate_limit_latency_ms_bucket", "rate_limit_errors_total", "sentinel_http_requests_total",
		"sentinel_http_request_duration_seconds_bucket", "sentinel_proxy_rejections_total",
		"sentinel_limit_store_calls_total", "sentinel_limit_breaker_state", "sentinel_adaptive_mode",
		"sentinel_adaptive_pressure", "sentinel_upstream_breaker_state", "go_goroutines", "process_resident_memory_bytes",
	} {
		assert.Contains(t, text, name)
	}
	assert.Equal(t, 3.0, scrape(t, g.admin, "sentinel_http_requests_total", "route", "default", "code", "429")-0, "three 429 answers")
}

// TestRedisStoppedUnderLoad: with on_store_failure local, the gateway keeps
// answering (no 5xx) while Redis is down, and goes back to store decisions
// soon after it returns.
func TestRedisStoppedUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	cfg := testConfig(up.url, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {ip: 0, tenant: 100000, store_timeout: 50ms, on_store_failure: local, breaker_cooldown: 100ms}
`, srv.Addr))
	gws := []*gateway{startGateway(t, cfg), startGateway(t, cfg)}
	var stop atomic.Bool
	var codes sync.Map
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				c := status("GET", gws[(w+i)%2].url+"/load", "X-API-Key", "gold-key")
				v, _ := codes.LoadOrStore(c, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Stop()
	eventually(t, 5*time.Second, "breaker open", func() bool { return !gws[0].app.limiter.StoreHealthy() })
	time.Sleep(time.Second)
	srv.Restart()
	back := eventually(t, 5*time.Second, "store decisions again", func() bool {
		return gws[0].app.limiter.StoreHealthy() && gws[1].app.limiter.StoreHealthy()
	})
	t.Logf("back to store decisions %v after Redis restarted", back.Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	summary := map[int]int64{}
	codes.Range(func(k, v any) bool { summary[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers by status: %v", summary)
	for c, n := range summary {
		assert.Equal(t, http.StatusOK, c, "%d answers with status %d", n, c)
	}
	assert.Less(t, back, time.Second, "decisions come back to the store within a second")
	assert.Positive(t, scrape(t, gws[0].admin, "sentinel_limit_fallback_decisions_total", "policy", "local"))
}

// TestRedisSlow: Redis paused past store_timeout: the gateway answers from
// its local fallback, then returns to Redis.
func TestRedisSlow(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, fmt.Sprintf(`
redis: {addrs: [%q]}
limits: {ip: 0, tenant: 100000, store_timeout: 20ms, breaker_cooldown: 100ms}
`, srv.Addr)))
	require.Equal(t, http.StatusOK, do(t, "GET", g.url+"/s", "", "X-API-Key", "gold-key").status)
	srv.Pause()
	for i := range 20 {
		a := do(t, "GET", g.url+fmt.Sprintf("/s%d", i), "", "X-API-Key", "gold-key", "X-Forwarded-For", "1.2.3.4")
		require.Equal(t, http.StatusOK, a.status)
	}
	assert.False(t, g.app.limiter.StoreHealthy())
	srv.Resume()
	eventually(t, 5*time.Second, "store decisions again", func() bool {
		do(t, "GET", g.url+"/s", "", "X-API-Key", "gold-key")
		return g.app.limiter.StoreHealthy()
	})
}

// TestStartsWhenRedisComesUpLate: a pod started before its Redis waits for it.
func TestStartsWhenRedisComesUpLate(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	up := startUpstream(t)
	go func() {
		time.Sleep(700 * time.Millisecond)
		srv.Restart()
	}()
	g := startGateway(t, testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q], connect_wait: 20s}\n", srv.Addr)))
	assert.Equal(t, http.StatusOK, do(t, "GET", g.url+"/late", "", "X-API-Key", "gold-key").status)
}

// TestRedisLosesItsData: a tenant and a rule created through the admin API
// survive a Redis that shuts down without saving and comes back empty on the
// same port: a pod writes them back within one resync, and both pods go on
// enforcing them.
func TestRedisLosesItsData(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	// A slow call under -race must not fall back to local shares, which
	// would count a request outside Redis and make the exact counts below
	// wrong for a reason this test is not about.
	cfg := testConfig(up.url, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 0, store_timeout: 1s}\n", srv.Addr))
	a, b := startGateway(t, cfg), startGateway(t, cfg)
	require.Equal(t, http.StatusOK, do(t, "PUT", a.admin+"/v1/tenants/lostco", `{"plan":"STANDARD","api_keys":["lostco-key"]}`).status)
	resp := do(t, "PUT", a.admin+"/v1/rules/lostco/default", `{"algorithm":"sliding_window","limit":3,"window":"1m"}`)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	eventually(t, 3*time.Second, "rule on pod B", func() bool {
		return do(t, "GET", b.admin+"/v1/rules/lostco/default", "").status == http.StatusOK
	})
	require.Equal(t, 3, allowedOf(t, []*gateway{a, b}, 6, "lostco-key"), "the rule holds before")
	restores := scrape(t, a.admin, "sentinel_catalog_restores_total")

	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer rc.Close()
	_ = rc.Do(context.Background(), rc.B().Shutdown().Nosave().Build()).Error() // the connection drops
	srv.Restart()                                                               // empty, same port
	held := func() bool {
		ctx := context.Background()
		rules, err1 := rc.Do(ctx, rc.B().Hkeys().Key("sentinel:{catalog}:rules").Build()).AsStrSlice()
		tenants, err2 := rc.Do(ctx, rc.B().Hkeys().Key("sentinel:{catalog}:tenants").Build()).AsStrSlice()
		return err1 == nil && err2 == nil && slices.Contains(rules, "lostco:default") && slices.Contains(tenants, "lostco")
	}
	took := eventually(t, 6*time.Second, "redis holds the tenant and the rule again", held)
	t.Logf("catalog back in redis %v after it restarted empty", took.Round(time.Millisecond))
	assert.Less(t, took, 5*time.Second, "within one resync (5s)")
	assert.Equal(t, 1.0, scrape(t, a.admin, "sentinel_catalog_restores_total")-restores, "one pod restores")

	time.Sleep(200 * time.Millisecond) // both pods have reloaded since
	for name, g := range map[string]*gateway{"A": a, "B": b} {
		require.Equal(t, http.StatusOK, do(t, "GET", g.admin+"/v1/tenants/lostco", "").status, "pod %s", name)
		require.Equal(t, http.StatusOK, do(t, "GET", g.admin+"/v1/rules/lostco/default", "").status, "pod %s", name)
	}
	// The counters went with Redis' data: the budget is whole again, and
	// still enforced by both pods together.
	assert.Equal(t, 3, allowedOf(t, []*gateway{a, b}, 6, "lostco-key"), "the rule holds after")
	// A pod started now reads them from Redis.
	c := startGateway(t, cfg)
	assert.Equal(t, http.StatusOK, do(t, "GET", c.admin+"/v1/rules/lostco/default", "").status)
}

// allowedOf sends n requests with key, alternating between gateways, and
// counts the 200s.
func allowedOf(t *testing.T, gws []*gateway, n int, key string) int {
	t.Helper()
	ok := 0
	for i := range n {
		a := do(t, "GET", gws[i%len(gws)].url+"/r", "", "X-API-Key", key)
		if a.status == http.StatusOK {
			ok++
		}
	}
	return ok
}

// TestRulesForTenantsThatCannotApply: a rule for an unknown tenant (or for
// "anonymous", a tenant no request has) is 404 naming the tenant; rules for
// clients without an API key use the tenant *anonymous* and limit each
// client IP.
func TestRulesForTenantsThatCannotApply(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, "server: {trusted_proxies: [127.0.0.1/32]}\nlimits: {ip: 0, tenant: 0}\n"))
	rule := `{"algorithm":"sliding_window","limit":2,"window":"1m"}`
	for _, tenant := range []string{"nosuch", "anonymous"} {
		a := do(t, "PUT", g.admin+"/v1/rules/"+tenant+"/default", rule)
		require.Equal(t, http.StatusNotFound, a.status, "%s: %s", tenant, a.body)
		body := a.json(t)
		assert.Equal(t, "tenant", body["field"])
		assert.Contains(t, body["error"], `"`+tenant+`"`)
		assert.Contains(t, body["error"], "*anonymous*")
		assert.Equal(t, http.StatusNotFound, do(t, "GET", g.admin+"/v1/rules/"+tenant+"/default", "").status, "nothing stored")
	}

	a := do(t, "PUT", g.admin+"/v1/rules/*anonymous*/default", rule)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, "*anonymous*", a.json(t)["tenant"])
	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		var got []int
		for range 3 {
			got = append(got, do(t, "GET", g.url+"/a", "", "X-Forwarded-For", ip).status)
		}
		assert.Equal(t, []int{200, 200, 429}, got, "client %s: each IP has its own budget", ip)
	}
	for range 3 {
		assert.Equal(t, http.StatusOK, do(t, "GET", g.url+"/a", "", "X-Forwarded-For", "10.0.0.1", "X-API-Key", "hot-key").status,
			"a tenant's requests are not anonymous")
	}
	require.Equal(t, http.StatusNoContent, do(t, "DELETE", g.admin+"/v1/rules/*anonymous*/default", "").status)
	assert.Equal(t, http.StatusOK, do(t, "GET", g.url+"/a", "", "X-Forwarded-For", "10.0.0.1").status, "no anonymous rule any more")
}

// TestMetricLabelsBounded: resource names the configuration does not know,
// sent through the check API, are counted under resource="other" without
// creating series; the series of an API-created tenant and rule go away when
// they are deleted.
func TestMetricLabelsBounded(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, testConfig(up.url, "limits: {ip: 0, tenant: 1000000}\n"))
	series := func() []string {
		var out []string
		for _, line := range strings.Split(string(do(t, "GET", g.admin+"/metrics", "").body), "\n") {
			if strings.HasPrefix(line, "rate_limit_requests_total{") {
				out = append(out, line)
			}
		}
		return out
	}
	other0 := scrape(t, g.admin, "rate_limit_requests_total", "tenant", "hot", "resource", "other")
	for batch := range 20 {
		var checks []string
		for i := range 100 {
			checks = append(checks, fmt.Sprintf(`{"tenant_id":"hot","resource":"unknown-%d","key":"k"}`, batch*100+i))
		}
		a := do(t, "POST", g.admin+"/v1/ratelimit/check/batch", `{"checks":[`+strings.Join(checks, ",")+`]}`)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
	all := series()
	t.Logf("%d label sets of rate_limit_requests_total after 2000 unknown resources", len(all))
	assert.Less(t, len(all), 50)
	for _, s := range all {
		assert.NotContains(t, s, `resource="unknown-`)
	}
	assert.Equal(t, 2000.0, scrape(t, g.admin, "rate_limit_requests_total", "tenant", "hot", "resource", "other")-other0)

	// API-created names get their labels, and lose them when deleted.
	require.Equal(t, http.StatusOK, do(t, "PUT", g.admin+"/v1/tenants/labelco", `{"plan":"FREE","api_keys":[]}`).status)
	require.Equal(t, http.StatusOK, do(t, "PUT", g.admin+"/v1/rules/labelco/labelres", `{"algorithm":"token_bucket","capacity":5,"refill_rate":1}`).status)
	// A new name is published to the metrics within labelDelay of its write
	// (a burst of writes shares one publication); until then its decisions
	// count under "other". Once a decision shows under the name, each next one
	// counts there.
	for _, res := range []string{"labelres", "default"} {
		check := func() {
			require.Equal(t, http.StatusOK, do(t, "POST", g.admin+"/v1/ratelimit/check", `{"tenant_id":"labelco","resource":"`+res+`","key":"k"}`).status)
		}
		require.Eventually(t, func() bool {
			check()
			return scrape(t, g.admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res) > 0
		}, 10*time.Second, 20*time.Millisecond, "decisions for %s never counted under its own name", res)
		before := scrape(t, g.admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res)
		check()
		assert.Equal(t, before+1, scrape(t, g.admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res), res)
	}
	require.Equal(t, http.StatusNoContent, do(t, "DELETE", g.admin+"/v1/rules/labelco/labelres", "").status)
	assert.NotContains(t, strings.Join(series(), "\n"), `resource="labelres"`, "the rule's last resource is gone")
	assert.Contains(t, strings.Join(series(), "\n"), `tenant="labelco",resource="default"`, "the tenant stays")
	require.Equal(t, http.StatusNoContent, do(t, "DELETE", g.admin+"/v1/tenants/labelco", "").status)
	assert.NotContains(t, strings.Join(series(), "\n"), `tenant="labelco"`, "the tenant's series are gone")
}
