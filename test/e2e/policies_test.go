package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// TestPoliciesAPIAcrossPods: three gateways on one redis-server. A policy
// written through pod 1 limits pod 3's requests within a second, and stops
// within a second of its DELETE; a reload of the file on one pod keeps the
// API's policies.
func TestPoliciesAPIAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	// A store call slower than the timeout (a loaded machine under -race)
	// would decide by the local share of this small limit.
	filePolicy := "policies:\n  - {name: per-ip, key: [ip], limits: [{limit: %d, window: 1s}]}\n"
	cfg := func(fileLimit int) string {
		return harness.ConfigYAML(up.URL, fmt.Sprintf("redis: {addrs: [%q]}\nlimits: {ip: 0, tenant: 1000, store_timeout: 2s}\n", srv.Addr)+
			fmt.Sprintf(filePolicy, fileLimit))
	}
	pods := []*harness.Gateway{harness.Start(t, cfg(1000)), harness.Start(t, cfg(1000)), harness.Start(t, cfg(1000))}
	policy := `{"match":{"resources":["default"]},"key":["api_key"],"plan_multiplier":false,"limits":[{"limit":2,"window":"1m"}]}`

	a := harness.Do(t, "PUT", pods[0].Admin+"/v1/policies/per-key", policy)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	took := harness.Eventually(t, 3*time.Second, "pod 3 limits by the policy", func() bool {
		return harness.Do(t, "GET", pods[2].URL+"/p", "", "X-API-Key", "gold-key").Status == http.StatusTooManyRequests
	})
	t.Logf("pod 3 limited by the policy %v after the PUT on pod 1", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second)
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", pods[2].URL+"/p", "", "X-API-Key", "hot-key").Status, "another key has its own budget")

	a = harness.Do(t, "DELETE", pods[0].Admin+"/v1/policies/per-key", "")
	require.Equal(t, http.StatusNoContent, a.Status, "%s", a.Body)
	took = harness.Eventually(t, 3*time.Second, "pod 3 stops limiting", func() bool {
		return harness.Do(t, "GET", pods[2].URL+"/p", "", "X-API-Key", "gold-key").Status == http.StatusOK
	})
	t.Logf("pod 3 stopped limiting %v after the DELETE on pod 1", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second)

	// A reload of pod 2's file (the file's policy changed) keeps the API's.
	// A policy of another name: its budgets start afresh.
	a = harness.Do(t, "PUT", pods[0].Admin+"/v1/policies/per-key-2", policy)
	require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
	harness.Eventually(t, 3*time.Second, "policy on pod 2", func() bool {
		return harness.Do(t, "GET", pods[1].Admin+"/v1/policies/per-key-2", "").Status == http.StatusOK
	})
	require.NoError(t, os.WriteFile(pods[1].Path, []byte(cfg(999)), 0o600))
	a = harness.Do(t, "POST", pods[1].Admin+"/v1/reload", "")
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	a = harness.Do(t, "GET", pods[1].Admin+"/v1/policies", "")
	require.Equal(t, http.StatusOK, a.Status)
	assert.Contains(t, string(a.Body), `"name":"per-key-2"`, "the API's policy stays")
	assert.Contains(t, string(a.Body), `"limit":999`, "the file's policy is the new one")
	var statuses []int
	for range 3 {
		statuses = append(statuses, harness.Do(t, "GET", pods[1].URL+"/p", "", "X-API-Key", "hot-key").Status)
	}
	assert.Equal(t, []int{200, 200, 429}, statuses, "pod 2 still enforces the API's policy")
	assert.False(t, strings.Contains(string(harness.Do(t, "GET", pods[2].Admin+"/v1/policies", "").Body), `"limit":999`),
		"a reload changes its own pod's file policies only")
}
