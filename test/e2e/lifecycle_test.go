package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

func lifecycleConfig(upstream string, ip int) string {
	return `
server: {admin_listen: "127.0.0.1:0", admin_token: s3cret}
upstreams:
  api: {targets: ["` + upstream + `"]}
routes:
  - {path_prefix: /, upstream: api, resource: default}
limits: {ip: ` + strconv.Itoa(ip) + `, window: 1m}
`
}

// TestReloadAppliesLimitsAndReportsRestartKeys: a reload applies a changed
// limits.ip at once, and names a changed server key as needing a restart;
// an invalid file keeps the running configuration.
func TestReloadAppliesLimitsAndReportsRestartKeys(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, lifecycleConfig(up.URL, 2))
	for range 2 {
		assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status)
	}
	assert.Equal(t, 429, harness.Do(t, "GET", g.URL+"/x", "").Status)

	require.NoError(t, os.WriteFile(g.Path, []byte(lifecycleConfig(up.URL, 100)+"\nidentity: {api_key_header: X-Key}\n"), 0o600))
	applied, restart, err := g.Reload()
	require.NoError(t, err)
	assert.Equal(t, []string{"limits.ip"}, applied)
	assert.Equal(t, []string{"identity.api_key_header"}, restart)
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status, "the raised limit applies without a restart")

	require.NoError(t, os.WriteFile(g.Path, []byte(strings.Replace(lifecycleConfig(up.URL, 1), "1m", "1sec", 1)), 0o600))
	a := harness.Do(t, "POST", g.Admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	assert.Equal(t, 400, a.Status)
	assert.Contains(t, string(a.Body), "limits.window")
	a = harness.Do(t, "GET", g.URL+"/x", "")
	assert.Equal(t, 200, a.Status)
	assert.Equal(t, "100", a.Header.Get("X-RateLimit-Limit"), "the running configuration stays")
}

// TestReloadRules: tenants and rules from the file are replaced by a reload.
func TestReloadRules(t *testing.T) {
	up := harness.StartUpstream(t)
	base := lifecycleConfig(up.URL, 1000) + "tenants:\n  - {id: acme, plan: FREE, api_keys: [k-1]}\n"
	g := harness.Start(t, base+"rules:\n  - {tenant: acme, resource: default, limit: 1, window: 1m}\n")
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "k-1").Status)
	assert.Equal(t, 429, harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "k-1").Status)

	require.NoError(t, os.WriteFile(g.Path, []byte(base+"rules:\n  - {tenant: acme, resource: default, limit: 50, window: 1m}\n"), 0o600))
	a := harness.Do(t, "POST", g.Admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	require.Equal(t, 200, a.Status, "%s", a.Body)
	assert.Equal(t, []any{"rules"}, a.JSON(t)["applied"])
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", "k-1").Status)
}

// TestReadyzDrainingAndProbesWithoutToken: with a token set, the probes
// harness.Answer without it; once draining, /readyz answers 503 and says so while
// the proxy still serves.
func TestReadyzDrainingAndProbesWithoutToken(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, lifecycleConfig(up.URL, 100))
	assert.Equal(t, 200, harness.Do(t, "GET", g.Admin+"/healthz", "").Status)
	assert.Equal(t, 200, harness.Do(t, "GET", g.Admin+"/readyz", "").Status)
	zero := time.Duration(0)
	g.Drain(zero)
	a := harness.Do(t, "GET", g.Admin+"/readyz", "")
	assert.Equal(t, 503, a.Status)
	assert.Contains(t, a.JSON(t)["reason"], "draining")
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status, "the proxy serves during the drain")
	assert.Equal(t, 200, harness.Do(t, "GET", g.Admin+"/healthz", "").Status)
}

// TestReloadReportsEveryMistake: a reload of a file with several type errors,
// an unknown key and values the sections refuse beside them answers 400
// with one line per mistake, each naming its key, and the running
// configuration stays.
func TestReloadReportsEveryMistake(t *testing.T) {
	up := harness.StartUpstream(t)
	good := `
server: {admin_listen: "127.0.0.1:0", admin_token: s3cret}
upstreams:
  api: {targets: ["` + up.URL + `"]}
routes:
  - {path_prefix: /, upstream: api}
`
	g := harness.Start(t, good)
	a := reloadFile(t, g, good+`
limits:
  max_keys: lots
  window: 10
  lease_sizee: 3
rules:
  - {resource: a, limit: x, window: 1s}
  - {resource: b, limit: 5, window: 1s, capacity: q}
`)
	require.Equal(t, 400, a.Status, "%s", a.Body)
	errs, _ := a.JSON(t)["errors"].([]any)
	want := []string{
		"limits.max_keys: `lots` is not a whole number",
		"limits.window: `10` is a bare number",
		"rules[0].limit: `x` is not a whole number",
		"rules[1].capacity: `q` is not a whole number",
		"limits.lease_sizee: unknown key",
		// What the sections refuse, in the same run (the rules name no
		// tenant, and resources no route serves).
		`rules[0].tenant: "" must be 1..64 characters`,
		`rules[1].tenant: "" must be 1..64 characters`,
		`rules[0].resource: no route serves resource "a"`,
		`rules[1].resource: no route serves resource "b"`,
	}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || strings.HasPrefix(e.(string), w)
		}
		assert.True(t, found, "no line %q in %q", w, errs)
	}
	assert.Len(t, errs, len(want), "%q", errs)
	assert.Equal(t, 200, harness.Do(t, "GET", g.URL+"/x", "").Status, "the running configuration stays")
}
