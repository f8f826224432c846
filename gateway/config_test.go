package gateway_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/internal/config"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// TestBadConfigs loads every testdata/config/bad_*.yaml and checks that loading
// fails with a message that names the key given on the file's "# want:" line.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/config/bad_*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want := harness.WantLine(t, file)
			_, err := gateway.LoadConfig(file, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), want)
		})
	}
}

func TestRootConfigIsValid(t *testing.T) {
	cfg, err := gateway.LoadConfig("../config.yaml", nil)
	require.NoError(t, err)
	assert.Empty(t, cfg.Redis.Addrs, "the root config runs on the in-memory store")
	assert.Equal(t, 3.0, cfg.Plans["PREMIUM"])
	assert.Equal(t, catalog.Plan(catalog.PlanPremium), cfg.Tenants[0].Plan)
	assert.Equal(t, int64(10<<20), int64(cfg.Proxy.Server.MaxRequestBody))
}

func TestEnvOverrides(t *testing.T) {
	env := []string{
		"SENTINEL_SERVER_LISTEN=127.0.0.1:9999",
		"SENTINEL_SERVER_READ_TIMEOUT=7s",
		"SENTINEL_REDIS_ADDRS=10.0.0.5:6379,10.0.0.6:6379",
		"SENTINEL_LIMITS_IP=7",
		"SENTINEL_LIMITS_FIRST_USES=false",
		"SENTINEL_UPSTREAMS_API_TARGETS=http://127.0.0.1:9001,http://127.0.0.1:9002",
		"SENTINEL_UPSTREAMS_API_PIPELINE=2", // a key the file does not have, of a pool it names
		"PATH=/usr/bin",
	}
	cfg, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", env)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9999", cfg.Proxy.Server.Listen)
	assert.Equal(t, 7*time.Second, cfg.Proxy.Server.ReadTimeout)
	assert.Equal(t, []string{"10.0.0.5:6379", "10.0.0.6:6379"}, cfg.Redis.Addrs)
	assert.EqualValues(t, 7, cfg.Limits.IP)
	assert.False(t, cfg.Limits.FirstUse())
	assert.Equal(t, []string{"http://127.0.0.1:9001", "http://127.0.0.1:9002"}, cfg.Upstreams["api"].Targets)
	assert.Equal(t, 2, cfg.Upstreams["api"].Pipeline)
}

func TestEnvUnknownKeyIsAnError(t *testing.T) {
	_, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{"SENTINEL_SERVER_LISTN=:1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SENTINEL_SERVER_LISTN")
}

func TestMissingConfigFile(t *testing.T) {
	_, err := gateway.LoadConfig("testdata/config/does-not-exist.yaml", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does-not-exist.yaml")
}

// TestAdminKeysUnderServer: the admin listener's keys are read from the
// server section, from the file and from the environment, and land in
// admin.Config with their defaults.
func TestAdminKeysUnderServer(t *testing.T) {
	cfg, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9090", cfg.Admin.Listen)
	assert.Equal(t, 5*time.Second, cfg.Admin.ReadTimeout)
	assert.Equal(t, 30*time.Second, cfg.Admin.WriteTimeout)
	assert.Equal(t, 60*time.Second, cfg.Admin.IdleTimeout)

	cfg, err = gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{
		"SENTINEL_SERVER_ADMIN_LISTEN=0.0.0.0:9191",
		"SENTINEL_SERVER_ADMIN_TOKEN=s3cret",
		"SENTINEL_SERVER_METRICS_REQUIRE_TOKEN=true",
		"SENTINEL_SERVER_ADMIN_READ_TIMEOUT=2s",
	})
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9191", cfg.Admin.Listen)
	assert.Equal(t, "s3cret", cfg.Admin.Token)
	assert.True(t, cfg.Admin.MetricsRequireToken)
	assert.Equal(t, 2*time.Second, cfg.Admin.ReadTimeout)
	assert.Equal(t, 5*time.Second, cfg.Proxy.Server.ReadTimeout, "the proxy's read_timeout is its own")
}

// TestUnknownKeysNamed: every key that no section reads is named, in the
// server section too, which the proxy and the admin listener share.
func TestUnknownKeysNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
server: {listen: ":8081", admin_listen: "127.0.0.1:9091", lisen: x}
routes: [{path_prefix: /, upstream: api, bogus: 1}]
upstreams: {api: {targets: ["http://127.0.0.1:9000"], tiemout: 1s}}
limts: {ip: 1}
`), 0o600))
	_, err := gateway.LoadConfig(path, nil)
	require.Error(t, err)
	for _, key := range []string{"limts", "server.lisen", "routes[0].bogus", "upstreams.api.tiemout"} {
		assert.Contains(t, err.Error(), key+": unknown key")
	}
	assert.Contains(t, err.Error(), "server.lisen: unknown key; did you mean server.listen?")
	assert.NotContains(t, err.Error(), "admin_listen")
	assert.NotContains(t, err.Error(), "server.listen: unknown key")
}

// TestPlanNamesAgree: adaptive names the plans as limit does (it does not
// import limit), so a tenant's plan maps to its priority.
func TestPlanNamesAgree(t *testing.T) {
	for plan, p := range map[string]adaptive.Priority{
		catalog.PlanFree: adaptive.PriorityFree, catalog.PlanStandard: adaptive.PriorityStandard, catalog.PlanPremium: adaptive.PriorityPremium,
	} {
		assert.Equal(t, p, adaptive.PriorityOf(plan), plan)
		assert.Equal(t, plan, p.String())
	}
	assert.Equal(t, adaptive.PriorityFree, adaptive.PriorityOf(""), "anonymous")
	assert.Len(t, catalog.PlanNames, 3)
}

// TestEnvValueErrorNamesTheVariable: a bad value from the environment names
// the variable and the key it sets.
func TestEnvValueErrorNamesTheVariable(t *testing.T) {
	_, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{"SENTINEL_LIMITS_IP=ten"})
	require.Error(t, err)
	assert.Equal(t, "limits.ip: `ten` is not a whole number, e.g. 100 (from SENTINEL_LIMITS_IP)", err.Error())
	_, err = gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{"SENTINEL_SERVER_DRAIN_DELAY=3"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "server.drain_delay: `3` is a bare number, not a duration")
	cfg, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{"SENTINEL_SERVER_DRAIN_DELAY=0"})
	require.NoError(t, err)
	assert.Zero(t, *cfg.Proxy.Server.DrainDelay, "0 is a duration without a unit")
}

func TestSuggest(t *testing.T) {
	known := config.KnownKeys(reflect.TypeFor[gateway.Config]())
	for unknown, want := range map[string]string{
		"limits.windw":          "limits.window",
		"limts":                 "limits",
		"server.admin_tokn":     "server.admin_token",
		"rules[3].limt":         "rules[3].limit",
		"upstreams.api.targtes": "upstreams.api.targets",
		"server.something_else": "",
	} {
		assert.Equal(t, want, config.Suggest(unknown, known), unknown)
	}
}

// TestEnvErrorsNameTheVariable: an invalid value from the environment names
// its SENTINEL_ variable, whether the decoder or a section's Validate refuses it.
func TestEnvErrorsNameTheVariable(t *testing.T) {
	for env, want := range map[string]string{
		"SENTINEL_SERVER_LISTEN=bad":                `server.listen: "bad" is not host:port (from SENTINEL_SERVER_LISTEN)`,
		"SENTINEL_REDIS_ADDRS=r1:6379,nope::":       `redis.addrs[1]: "nope::" is not host:port (from SENTINEL_REDIS_ADDRS)`,
		"SENTINEL_UPSTREAMS_API_TARGETS=ftp://x":    `upstreams.api.targets[0]: "ftp://x" is not an http(s) URL (from SENTINEL_UPSTREAMS_API_TARGETS)`,
		"SENTINEL_LIMITS_ON_STORE_FAILURE=maybe":    `limits.on_store_failure: "maybe" is not one of local, open, closed (from SENTINEL_LIMITS_ON_STORE_FAILURE)`,
		"SENTINEL_LIMITS_QUOTA_TIME_ZONE=Mars/Base": `limits.quota_time_zone: "Mars/Base" is not a time zone such as UTC or Europe/Paris (from SENTINEL_LIMITS_QUOTA_TIME_ZONE)`,
		"SENTINEL_LIMITS_IP_SCOPE=some":             `limits.ip_scope: "some" is not one of all, anonymous (from SENTINEL_LIMITS_IP_SCOPE)`,
		"SENTINEL_LOG_LEVEL=loud":                   `log.level: "loud" is not one of debug, info, warn, error (from SENTINEL_LOG_LEVEL)`,
		"SENTINEL_LIMITS_TENANT=2.5":                "limits.tenant: `2.5` is not a whole number, e.g. 100 (from SENTINEL_LIMITS_TENANT)",
	} {
		_, err := gateway.LoadConfig("testdata/config/good_minimal.yaml", []string{env})
		require.Error(t, err, env)
		assert.Contains(t, err.Error(), want, env)
	}
	_, err := gateway.LoadConfig("testdata/config/bad_failure_policy.yaml", []string{"SENTINEL_LOG_LEVEL=debug"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "(from", "a key from the file names no variable")
}
