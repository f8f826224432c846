package e2e

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

// TestCheckAPISharesTheProxyBudget: decisions through the check API and
// through the proxy count against one budget.
func TestCheckAPISharesTheProxyBudget(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, `
limits: {ip: 0}
rules:
  - {tenant: hot, resource: default, algorithm: sliding_window, limit: 5, window: 1m}
`))
	check := `{"tenant_id":"hot","resource":"default","key":"hot-key","tokens_requested":3}`
	a := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", check, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	body := a.JSON(t)
	assert.Equal(t, true, body["allowed"])
	assert.EqualValues(t, 2, body["remaining"])
	assert.NotEmpty(t, a.Header.Get("RateLimit-Policy"))

	for i := range 2 {
		a = harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "hot-key")
		require.Equal(t, http.StatusOK, a.Status, "proxy request %d", i+1)
	}
	a = harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "hot-key")
	require.Equal(t, http.StatusTooManyRequests, a.Status)

	a = harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", `{"tenant_id":"hot","resource":"default","key":"hot-key"}`)
	require.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, false, a.JSON(t)["allowed"])
	assert.Greater(t, a.JSON(t)["retry_after_ms"], 0.0)
}

// TestCheckAPIBadRequests: every malformed check gets 400 naming the field,
// and is not counted.
func TestCheckAPIBadRequests(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "limits: {ip: 0}\n"))
	before := harness.Scrape(t, g.Admin, "rate_limit_requests_total")
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
		a := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", tc.body)
		require.Equal(t, http.StatusBadRequest, a.Status, "body %.60q: %s", tc.body, a.Body)
		assert.Equal(t, tc.field, a.JSON(t)["field"], "body %.60q", tc.body)
	}
	assert.Equal(t, before, harness.Scrape(t, g.Admin, "rate_limit_requests_total"), "bad checks are not counted")
}

// TestRulesAcrossPods: a rule written through one gateway changes the
// decisions of another within a second, survives restarting both, and
// deleting it restores the default.
func TestRulesAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	// A store call slower than the timeout (a loaded machine under -race)
	// would decide by the local share of this small rule: 1 per pod.
	cfg := harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr))
	a, b := harness.Start(t, cfg), harness.Start(t, cfg)

	rule := `{"algorithm":"sliding_window","limit":2,"window":"1m"}`
	resp := harness.Do(t, "PUT", a.Admin+"/v1/rules/gold/default", rule)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	took := harness.Eventually(t, 3*time.Second, "rule visible on pod B", func() bool {
		return harness.Do(t, "GET", b.Admin+"/v1/rules/gold/default", "").Status == http.StatusOK
	})
	t.Logf("rule visible on the second pod after %v", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second)
	statuses := []int{}
	for range 3 {
		statuses = append(statuses, harness.Do(t, "GET", b.URL+"/r", "", "X-API-Key", "gold-key").Status)
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
		r := harness.Do(t, "PUT", a.Admin+"/v1/rules/gold/other", body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
		assert.Equal(t, field, r.JSON(t)["field"], body)
	}

	// Both pods restart: the rule is read back from Redis.
	a.Stop()
	b.Stop()
	c := harness.Start(t, cfg)
	require.Equal(t, http.StatusOK, harness.Do(t, "GET", c.Admin+"/v1/rules/gold/default", "").Status)

	require.Equal(t, http.StatusNoContent, harness.Do(t, "DELETE", c.Admin+"/v1/rules/gold/default", "").Status)
	require.Equal(t, http.StatusNotFound, harness.Do(t, "GET", c.Admin+"/v1/rules/gold/default", "").Status)
	for range 5 {
		require.Equal(t, http.StatusOK, harness.Do(t, "GET", c.URL+"/r", "", "X-API-Key", "gold-key").Status, "default limits again")
	}

	// Tenants are managed the same way: a new customer without a restart.
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", c.Admin+"/v1/tenants/newco", `{"plan":"STANDARD","api_keys":["newco-key"]}`).Status)
	a2 := harness.Do(t, "GET", c.URL+"/r", "", "X-API-Key", "newco-key")
	require.Equal(t, http.StatusOK, a2.Status)
	assert.NotEmpty(t, a2.Header.Get("X-RateLimit-Limit"), "the new tenant is limited as a tenant")
}

// TestAdminAuth: with a token, every endpoint but /healthz and /metrics needs
// it.
func TestAdminAuth(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "server: {admin_token: s3cret}\n"))
	assert.Equal(t, http.StatusUnauthorized, harness.Do(t, "GET", g.Admin+"/v1/rules", "").Status)
	assert.Equal(t, http.StatusUnauthorized, harness.Do(t, "GET", g.Admin+"/v1/rules", "", "Authorization", "Bearer wrong").Status)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/v1/rules", "", "Authorization", "Bearer s3cret").Status)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/healthz", "").Status)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/metrics", "").Status)
	// The proxy listener never serves admin paths: they go to the upstream.
	a := harness.Do(t, "GET", g.URL+"/v1/rules", "")
	assert.Equal(t, `{"path":"/v1/rules"}`, string(a.Body))
}

// TestMetricsAfterTraffic scrapes /metrics after known traffic.
func TestMetricsAfterTraffic(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, `
limits: {ip: 0}
rules:
  - {tenant: hot, resource: default, algorithm: token_bucket, capacity: 2, refill_rate: 0}
`))
	before := func(name string) float64 {
		return harness.Scrape(t, g.Admin, name, "tenant", "hot", "resource", "default")
	}
	req0, ok0, bl0 := before("rate_limit_requests_total"), before("rate_limit_allowed_total"), before("rate_limit_blocked_total")
	for range 5 {
		harness.Do(t, "GET", g.URL+"/m", "", "X-API-Key", "hot-key")
	}
	assert.Equal(t, 5.0, before("rate_limit_requests_total")-req0)
	assert.Equal(t, 2.0, before("rate_limit_allowed_total")-ok0)
	assert.Equal(t, 3.0, before("rate_limit_blocked_total")-bl0)
	text := string(harness.Do(t, "GET", g.Admin+"/metrics", "").Body)
	for _, name := range []string{
		"rate_limit_latency_ms_bucket", "rate_limit_errors_total", "sentinel_http_requests_total",
		"sentinel_http_request_duration_seconds_bucket", "sentinel_proxy_rejections_total",
		"sentinel_limit_store_calls_total", "sentinel_limit_breaker_state", "sentinel_adaptive_mode",
		"sentinel_adaptive_pressure", "sentinel_upstream_breaker_state", "go_goroutines", "process_resident_memory_bytes",
	} {
		assert.Contains(t, text, name)
	}
	assert.Equal(t, 3.0, harness.Scrape(t, g.Admin, "sentinel_http_requests_total", "route", "default", "code", "429")-0, "three 429 answers")
}

// TestRulesForTenantsThatCannotApply: a rule for an unknown tenant (or for
// "anonymous", a tenant no request has) is 404 naming the tenant; rules for
// clients without an API key use the tenant *anonymous* and limit each
// client IP.
func TestRulesForTenantsThatCannotApply(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "server: {trusted_proxies: [127.0.0.1/32]}\nlimits: {ip: 0, tenant: 0}\n"))
	rule := `{"algorithm":"sliding_window","limit":2,"window":"1m"}`
	for _, tenant := range []string{"nosuch", "anonymous"} {
		a := harness.Do(t, "PUT", g.Admin+"/v1/rules/"+tenant+"/default", rule)
		require.Equal(t, http.StatusNotFound, a.Status, "%s: %s", tenant, a.Body)
		body := a.JSON(t)
		assert.Equal(t, "tenant", body["field"])
		assert.Contains(t, body["error"], `"`+tenant+`"`)
		assert.Contains(t, body["error"], "*anonymous*")
		assert.Equal(t, http.StatusNotFound, harness.Do(t, "GET", g.Admin+"/v1/rules/"+tenant+"/default", "").Status, "nothing stored")
	}

	a := harness.Do(t, "PUT", g.Admin+"/v1/rules/*anonymous*/default", rule)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	assert.Equal(t, "*anonymous*", a.JSON(t)["tenant"])
	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		var got []int
		for range 3 {
			got = append(got, harness.Do(t, "GET", g.URL+"/a", "", "X-Forwarded-For", ip).Status)
		}
		assert.Equal(t, []int{200, 200, 429}, got, "client %s: each IP has its own budget", ip)
	}
	for range 3 {
		assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/a", "", "X-Forwarded-For", "10.0.0.1", "X-API-Key", "hot-key").Status,
			"a tenant's requests are not anonymous")
	}
	require.Equal(t, http.StatusNoContent, harness.Do(t, "DELETE", g.Admin+"/v1/rules/*anonymous*/default", "").Status)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/a", "", "X-Forwarded-For", "10.0.0.1").Status, "no anonymous rule any more")
}

// TestMetricLabelsBounded: resource names the configuration does not know,
// sent through the check API, are counted under resource="other" without
// creating series; the series of an API-created tenant and rule go away when
// they are deleted.
func TestMetricLabelsBounded(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, harness.ConfigYAML(up.URL, "limits: {ip: 0, tenant: 1000000}\n"))
	series := func() []string {
		var out []string
		for _, line := range strings.Split(string(harness.Do(t, "GET", g.Admin+"/metrics", "").Body), "\n") {
			if strings.HasPrefix(line, "rate_limit_requests_total{") {
				out = append(out, line)
			}
		}
		return out
	}
	other0 := harness.Scrape(t, g.Admin, "rate_limit_requests_total", "tenant", "hot", "resource", "other")
	for batch := range 20 {
		var checks []string
		for i := range 100 {
			checks = append(checks, fmt.Sprintf(`{"tenant_id":"hot","resource":"unknown-%d","key":"k"}`, batch*100+i))
		}
		a := harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check/batch", `{"checks":[`+strings.Join(checks, ",")+`]}`)
		require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	}
	all := series()
	t.Logf("%d label sets of rate_limit_requests_total after 2000 unknown resources", len(all))
	assert.Less(t, len(all), 50)
	for _, s := range all {
		assert.NotContains(t, s, `resource="unknown-`)
	}
	assert.Equal(t, 2000.0, harness.Scrape(t, g.Admin, "rate_limit_requests_total", "tenant", "hot", "resource", "other")-other0)

	// API-created names get their labels, and lose them when deleted.
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", g.Admin+"/v1/tenants/labelco", `{"plan":"FREE","api_keys":[]}`).Status)
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", g.Admin+"/v1/rules/labelco/labelres", `{"algorithm":"token_bucket","capacity":5,"refill_rate":1}`).Status)
	// A new name is published to the metrics within labelDelay of its write
	// (a burst of writes shares one publication); until then its decisions
	// count under "other". Once a decision shows under the name, each next one
	// counts there.
	for _, res := range []string{"labelres", "default"} {
		check := func() {
			require.Equal(t, http.StatusOK, harness.Do(t, "POST", g.Admin+"/v1/ratelimit/check", `{"tenant_id":"labelco","resource":"`+res+`","key":"k"}`).Status)
		}
		require.Eventually(t, func() bool {
			check()
			return harness.Scrape(t, g.Admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res) > 0
		}, 10*time.Second, 20*time.Millisecond, "decisions for %s never counted under its own name", res)
		before := harness.Scrape(t, g.Admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res)
		check()
		assert.Equal(t, before+1, harness.Scrape(t, g.Admin, "rate_limit_requests_total", "tenant", "labelco", "resource", res), res)
	}
	require.Equal(t, http.StatusNoContent, harness.Do(t, "DELETE", g.Admin+"/v1/rules/labelco/labelres", "").Status)
	assert.NotContains(t, strings.Join(series(), "\n"), `resource="labelres"`, "the rule's last resource is gone")
	assert.Contains(t, strings.Join(series(), "\n"), `tenant="labelco",resource="default"`, "the tenant stays")
	require.Equal(t, http.StatusNoContent, harness.Do(t, "DELETE", g.Admin+"/v1/tenants/labelco", "").Status)
	assert.NotContains(t, strings.Join(series(), "\n"), `tenant="labelco"`, "the tenant's series are gone")
}
