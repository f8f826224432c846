package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	up := startUpstream(t)
	g := startGateway(t, lifecycleConfig(up.url, 2))
	for range 2 {
		assert.Equal(t, 200, do(t, "GET", g.url+"/x", "").status)
	}
	assert.Equal(t, 429, do(t, "GET", g.url+"/x", "").status)

	require.NoError(t, os.WriteFile(g.path, []byte(lifecycleConfig(up.url, 100)+"\nidentity: {api_key_header: X-Key}\n"), 0o600))
	applied, restart, err := g.app.reload()
	require.NoError(t, err)
	assert.Equal(t, []string{"limits.ip"}, applied)
	assert.Equal(t, []string{"identity.api_key_header"}, restart)
	assert.Equal(t, 200, do(t, "GET", g.url+"/x", "").status, "the raised limit applies without a restart")

	require.NoError(t, os.WriteFile(g.path, []byte(strings.Replace(lifecycleConfig(up.url, 1), "1m", "1sec", 1)), 0o600))
	a := do(t, "POST", g.admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	assert.Equal(t, 400, a.status)
	assert.Contains(t, string(a.body), "limits.window")
	assert.EqualValues(t, 100, g.app.cfg.Limits.IP, "the running configuration stays")
	assert.Equal(t, 200, do(t, "GET", g.url+"/x", "").status)
}

// TestReloadRules: tenants and rules from the file are replaced by a reload.
func TestReloadRules(t *testing.T) {
	up := startUpstream(t)
	base := lifecycleConfig(up.url, 1000) + "tenants:\n  - {id: acme, plan: FREE, api_keys: [k-1]}\n"
	g := startGateway(t, base+"rules:\n  - {tenant: acme, resource: default, limit: 1, window: 1m}\n")
	assert.Equal(t, 200, do(t, "GET", g.url+"/x", "", "X-API-Key", "k-1").status)
	assert.Equal(t, 429, do(t, "GET", g.url+"/x", "", "X-API-Key", "k-1").status)

	require.NoError(t, os.WriteFile(g.path, []byte(base+"rules:\n  - {tenant: acme, resource: default, limit: 50, window: 1m}\n"), 0o600))
	a := do(t, "POST", g.admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	require.Equal(t, 200, a.status, "%s", a.body)
	assert.Equal(t, []any{"rules"}, a.json(t)["applied"])
	assert.Equal(t, 200, do(t, "GET", g.url+"/x", "", "X-API-Key", "k-1").status)
}

// TestReadyzDrainingAndProbesWithoutToken: with a token set, the probes
// answer without it; once draining, /readyz answers 503 and says so while
// the proxy still serves.
func TestReadyzDrainingAndProbesWithoutToken(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, lifecycleConfig(up.url, 100))
	assert.Equal(t, 200, do(t, "GET", g.admin+"/healthz", "").status)
	assert.Equal(t, 200, do(t, "GET", g.admin+"/readyz", "").status)
	zero := time.Duration(0)
	g.app.drain(&zero)
	a := do(t, "GET", g.admin+"/readyz", "")
	assert.Equal(t, 503, a.status)
	assert.Contains(t, a.json(t)["reason"], "draining")
	assert.Equal(t, 200, do(t, "GET", g.url+"/x", "").status, "the proxy serves during the drain")
	assert.Equal(t, 200, do(t, "GET", g.admin+"/healthz", "").status)
}

func TestCheckFlag(t *testing.T) {
	assert.Equal(t, 0, run([]string{"-check", "-config", "testdata/config/good_minimal.yaml"}, nil))
	assert.Equal(t, 2, run([]string{"-check", "-config", "testdata/config/bad_algorithm.yaml"}, nil))
	assert.Equal(t, 2, run([]string{"-check", "-config", "testdata/config/good_minimal.yaml"}, []string{"SENTINEL_LIMITS_IP=ten"}))
	assert.Equal(t, 0, run([]string{"-help"}, nil))
	assert.Equal(t, 2, run([]string{"-nonsense"}, nil))
}
