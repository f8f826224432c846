package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/gateway"
)

// TestEveryMistakeInOneRun: a file's values that do not decode, its
// unknown keys and the values its sections refuse are all reported by one
// load (a fraction in limits.tenant hid limits.ip: -3, and a bad limits
// section hid the policies' mistakes), and the value put in place of one
// that did not decode is not reported.
func TestEveryMistakeInOneRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
server: {listen: "127.0.0.1:0", read_timeout: 10, max_request_body: -5}
upstreams: {api: {targets: ["http://127.0.0.1:9000"]}}
routes:
  - {path_prefix: /, upstream: apii, resource: default}
limits: {algorithm: sliding, tenant: 100.5, ip: -3, tennant: 1}
tenants: [{id: demo, plan: FREE, api_keys: [k1]}]
rules: [{tenant: demo, resource: default, algorithm: token_bucket}]
policies:
  - {name: p1, key: [ip], limits: [{limit: 0, window: 1m}]}
`), 0o600))
	_, err := gateway.LoadConfig(path, nil)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		"server.read_timeout: `10` is a bare number",
		"limits.algorithm: \"sliding\" is not one of",
		"limits.tenant: `100.5` is not a whole number",
		"limits.tennant: unknown key; did you mean limits.tenant?",
		"server.max_request_body: -5 is not a size",
		"routes[0].upstream: \"apii\" is not a configured upstream",
		"limits.ip: -3 is out of range",
		"rules[0].capacity: missing",
		"policies[0].limits[0].limit: policy \"p1\": missing: a limit of 1..1000000000000 is required for sliding_window",
	} {
		assert.Contains(t, msg, want)
	}
	assert.Equal(t, 1, strings.Count(msg, "limits.tenant:"), "the tenant limit put in place of 100.5 is not reported: %s", msg)
	assert.Equal(t, 1, strings.Count(msg, "server.read_timeout:"), "%s", msg)
}

// TestEnvUnknownKeySuggests: a mistyped variable is named with the one it
// may mean, as a mistyped file key is.
func TestEnvUnknownKeySuggests(t *testing.T) {
	_, err := gateway.LoadConfig("testdata/config/good_minimal.yaml",
		[]string{"SENTINEL_LIMITS_IPP=3", "SENTINEL_SERVER_LISTN=:1", "SENTINEL_NOTHING_LIKE_IT=1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "environment: SENTINEL_LIMITS_IPP names no config key; did you mean SENTINEL_LIMITS_IP?")
	assert.Contains(t, err.Error(), "environment: SENTINEL_SERVER_LISTN names no config key; did you mean SENTINEL_SERVER_LISTEN?")
	assert.Contains(t, err.Error(), "environment: SENTINEL_NOTHING_LIKE_IT names no config key\n")
}

// TestResourceNoRouteServes: a policy or rule of the file naming a
// resource that no route serves is refused (it would never apply to a
// proxied request), with the served resource it may mean; listed in
// limits.check_resources, a resource the check API alone uses is accepted.
func TestResourceNoRouteServes(t *testing.T) {
	yaml := `
upstreams: {api: {targets: ["http://127.0.0.1:9000"]}}
routes: [{path_prefix: /, upstream: api, resource: net}]
tenants: [{id: acme, plan: FREE}]
rules: [{tenant: acme, resource: search, limit: 3}]
policies:
  - {name: p1, key: [ip], match: {resources: [net, nett]}, limits: [{limit: 5, window: 1m}]}
`
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	_, err := gateway.LoadConfig(path, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `rules[0].resource: no route serves resource "search" (routes serve net)`)
	assert.Contains(t, err.Error(), `policies[0].match.resources[1]: policy "p1": no route serves resource "nett" (routes serve net), so it would never apply to a proxied request (did you mean net?); list it in limits.check_resources if only the check API uses it`)
	assert.NotContains(t, err.Error(), "resources[0]")

	cfg, err := gateway.LoadConfig(path, []string{"SENTINEL_LIMITS_CHECK_RESOURCES=search,nett"})
	require.NoError(t, err)
	assert.Equal(t, []string{"search", "nett"}, cfg.Limits.CheckResources)
	_, err = gateway.LoadConfig(path, []string{"SENTINEL_LIMITS_CHECK_RESOURCES=search,n tt"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "limits.check_resources[1]:")
}
