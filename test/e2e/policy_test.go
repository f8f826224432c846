package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
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
	up := harness.StartUpstream(t)
	cfg := harness.Config(up.URL,
		harness.WithSection("routes", "  - {path_prefix: /bids, upstream: api, resource: bids}\n  - {path_prefix: /, upstream: api, resource: default}\n"),
		harness.WithExtra(strings.Replace(bidsPolicyYAML, "DAY", "15", 1)))
	g := harness.Start(t, cfg)
	bid := func(user string) harness.Answer {
		if user == "" {
			return harness.Do(t, "POST", g.URL+"/bids", "{}")
		}
		return harness.Do(t, "POST", g.URL+"/bids", "{}", "X-User-Id", user)
	}
	for i := range 10 {
		a := bid("u1")
		require.Equal(t, http.StatusOK, a.Status, "bid %d: %s", i+1, a.Body)
	}
	a := bid("u1")
	require.Equal(t, http.StatusTooManyRequests, a.Status, "the 11th bid within a second")
	assert.EqualValues(t, 10, a.JSON(t)["limit"])
	assert.Contains(t, a.Header.Get("RateLimit-Policy"), "bids-per-user")
	assert.Equal(t, http.StatusOK, bid("u2").Status, "another user")
	assert.Equal(t, http.StatusOK, bid("").Status, "no X-User-Id: not counted")
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/bids", "", "X-User-Id", "u1").Status, "GET is not matched")
	for range 12 {
		require.Equal(t, http.StatusOK, bid("monitoring-bot").Status, "unlimited")
	}

	time.Sleep(1100 * time.Millisecond)
	for i := range 5 {
		require.Equal(t, http.StatusOK, bid("u1").Status, "bid %d of the second second", i+11)
	}
	a = bid("u1")
	require.Equal(t, http.StatusTooManyRequests, a.Status, "the 16th bid of the day")
	assert.EqualValues(t, 15, a.JSON(t)["limit"], "refused by the day's quota")
	decisions := func(limit, decision string) float64 {
		return harness.Scrape(t, g.Admin, "sentinel_limit_policy_decisions_total", "policy", "bids-per-user", "limit", limit, "decision", decision)
	}
	assert.Equal(t, 1.0, decisions("1s", "blocked"), "the 11th bid")
	assert.Equal(t, 1.0, decisions("day", "blocked"), "the 16th bid")
	assert.Equal(t, 16.0, decisions("day", "allowed"), "u1's 15 bids and u2's one")

	// A reload raises the quota: the next bid passes.
	require.NoError(t, os.WriteFile(g.Path, []byte(strings.Replace(cfg, "limit: 15, period", "limit: 2000, period", 1)), 0o600))
	applied, _, err := g.Reload()
	require.NoError(t, err)
	assert.Contains(t, applied, "policies")
	time.Sleep(1100 * time.Millisecond)
	assert.Equal(t, http.StatusOK, bid("u1").Status, "the raised quota applies")
}

// TestRemovedPolicySeriesGo: the decision series of a policy that a
// reload removes from the file, or that DELETE /v1/policies removes, leave
// /metrics; a policy that stays keeps its series and its count.
func TestRemovedPolicySeriesGo(t *testing.T) {
	up := harness.StartUpstream(t)
	policies := "policies:\n  - {name: series-kept, key: [ip], limits: [{limit: 1000, window: 1s}]}\n" +
		"  - {name: series-removed, key: [ip], limits: [{limit: 1000, window: 1s}]}\n"
	cfg := harness.Config(up.URL, harness.WithExtra(policies))
	g := harness.Start(t, cfg)
	require.Equal(t, http.StatusOK, harness.Do(t, "GET", g.URL+"/x", "").Status)
	exposition := func() string { // the policy decision series only
		var out []string
		for _, line := range strings.Split(string(harness.Do(t, "GET", g.Admin+"/metrics", "").Body), "\n") {
			if strings.HasPrefix(line, "sentinel_limit_policy_decisions_total{") {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	}
	assert.Contains(t, exposition(), `policy="series-removed"`)

	require.NoError(t, os.WriteFile(g.Path, []byte(strings.Replace(cfg, "  - {name: series-removed", "  - {name: series-other", 1)), 0o600))
	_, _, err := g.Reload()
	require.NoError(t, err)
	text := exposition()
	assert.NotContains(t, text, `policy="series-removed"`, "removed by the reload")
	assert.Contains(t, text, `policy="series-other"`)
	assert.Equal(t, 1.0, harness.Scrape(t, g.Admin, "sentinel_limit_policy_decisions_total", "policy", "series-kept", "decision", "allowed"),
		"the policy that stays keeps its count")

	a := harness.Do(t, "PUT", g.Admin+"/v1/policies/series-api", `{"key":["ip"],"limits":[{"limit":5}]}`)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	assert.Contains(t, exposition(), `policy="series-api"`)
	require.Equal(t, http.StatusNoContent, harness.Do(t, "DELETE", g.Admin+"/v1/policies/series-api", "").Status)
	assert.NotContains(t, exposition(), `policy="series-api"`, "removed through the API")
}
