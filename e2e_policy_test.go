package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bidsPolicyYAML is the documentation's policy, with a day quota small
// enough to reach in a test.
const bidsPolicyYAML = `
policies:
  - name: bids-per-user
    match: {resources: [bids], methods: [POST]}
    key: [header:X-User-Id]
    limits:
      - {limit: 10, window: 1s}
      - {limit: DAY, period: day}
    unlimited: {values: [monitoring-bot]}
`

// TestPolicyE2E runs the bids policy through the proxy: the 11th bid of a
// user within a second is refused, the day's quota after it, other users,
// other methods, requests without the header and the exempt value are
// not counted; a reload applies a changed policy.
func TestPolicyE2E(t *testing.T) {
	up := startUpstream(t)
	cfg := gatewayConfig(up.url,
		withSection("routes", "  - {path_prefix: /bids, upstream: api, resource: bids}\n  - {path_prefix: /, upstream: api, resource: default}\n"),
		withExtra(strings.Replace(bidsPolicyYAML, "DAY", "15", 1)))
	g := startGateway(t, cfg)
	bid := func(user string) answer {
		if user == "" {
			return do(t, "POST", g.url+"/bids", "{}")
		}
		return do(t, "POST", g.url+"/bids", "{}", "X-User-Id", user)
	}
	for i := range 10 {
		a := bid("u1")
		require.Equal(t, http.StatusOK, a.status, "bid %d: %s", i+1, a.body)
	}
	a := bid("u1")
	require.Equal(t, http.StatusTooManyRequests, a.status, "the 11th bid within a second")
	assert.EqualValues(t, 10, a.json(t)["limit"])
	assert.Contains(t, a.header.Get("RateLimit-Policy"), "bids-per-user")
	assert.Equal(t, http.StatusOK, bid("u2").status, "another user")
	assert.Equal(t, http.StatusOK, bid("").status, "no X-User-Id: not counted")
	assert.Equal(t, http.StatusOK, do(t, "GET", g.url+"/bids", "", "X-User-Id", "u1").status, "GET is not matched")
	for range 12 {
		require.Equal(t, http.StatusOK, bid("monitoring-bot").status, "unlimited")
	}

	time.Sleep(1100 * time.Millisecond)
	for i := range 5 {
		require.Equal(t, http.StatusOK, bid("u1").status, "bid %d of the second second", i+11)
	}
	a = bid("u1")
	require.Equal(t, http.StatusTooManyRequests, a.status, "the 16th bid of the day")
	assert.EqualValues(t, 15, a.json(t)["limit"], "refused by the day's quota")
	decisions := func(limit, decision string) float64 {
		return scrape(t, g.admin, "sentinel_limit_policy_decisions_total", "policy", "bids-per-user", "limit", limit, "decision", decision)
	}
	assert.Equal(t, 1.0, decisions("1s", "blocked"), "the 11th bid")
	assert.Equal(t, 1.0, decisions("day", "blocked"), "the 16th bid")
	assert.Equal(t, 16.0, decisions("day", "allowed"), "u1's 15 bids and u2's one")

	// A reload raises the quota: the next bid passes.
	require.NoError(t, os.WriteFile(g.path, []byte(strings.Replace(cfg, "limit: 15, period", "limit: 2000, period", 1)), 0o600))
	applied, _, err := g.app.reload()
	require.NoError(t, err)
	assert.Contains(t, applied, "policies")
	time.Sleep(1100 * time.Millisecond)
	assert.Equal(t, http.StatusOK, bid("u1").status, "the raised quota applies")
}

// TestRemovedPolicySeriesGo: the decision series of a policy that a
// reload removes from the file, or that DELETE /v1/policies removes, leave
// /metrics; a policy that stays keeps its series and its count.
func TestRemovedPolicySeriesGo(t *testing.T) {
	up := startUpstream(t)
	policies := "policies:\n  - {name: series-kept, key: [ip], limits: [{limit: 1000, window: 1s}]}\n" +
		"  - {name: series-removed, key: [ip], limits: [{limit: 1000, window: 1s}]}\n"
	cfg := gatewayConfig(up.url, withExtra(policies))
	g := startGateway(t, cfg)
	require.Equal(t, http.StatusOK, do(t, "GET", g.url+"/x", "").status)
	exposition := func() string { // the policy decision series only
		var out []string
		for _, line := range strings.Split(string(do(t, "GET", g.admin+"/metrics", "").body), "\n") {
			if strings.HasPrefix(line, "sentinel_limit_policy_decisions_total{") {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	}
	assert.Contains(t, exposition(), `policy="series-removed"`)

	require.NoError(t, os.WriteFile(g.path, []byte(strings.Replace(cfg, "  - {name: series-removed", "  - {name: series-other", 1)), 0o600))
	_, _, err := g.app.reload()
	require.NoError(t, err)
	text := exposition()
	assert.NotContains(t, text, `policy="series-removed"`, "removed by the reload")
	assert.Contains(t, text, `policy="series-other"`)
	assert.Equal(t, 1.0, scrape(t, g.admin, "sentinel_limit_policy_decisions_total", "policy", "series-kept", "decision", "allowed"),
		"the policy that stays keeps its count")

	a := do(t, "PUT", g.admin+"/v1/policies/series-api", `{"key":["ip"],"limits":[{"limit":5}]}`)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	assert.Contains(t, exposition(), `policy="series-api"`)
	require.Equal(t, http.StatusNoContent, do(t, "DELETE", g.admin+"/v1/policies/series-api", "").status)
	assert.NotContains(t, exposition(), `policy="series-api"`, "removed through the API")
}
