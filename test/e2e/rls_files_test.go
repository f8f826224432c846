package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/sentinel-gateway/sentinel/test/harness"
)

// envoyFile is an envoyproxy/ratelimit configuration of domain "edge" with
// n requests per minute per generic_key.
func envoyFile(n int) string {
	return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: generic_key\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
}

// TestEnvoyRLSConfigFilesReload: grpc.config_files decide the descriptors of
// their domain; a reload re-reads the files (the same paths), applies a
// valid set and refuses an invalid one, naming the file, keeping the old.
func TestEnvoyRLSConfigFilesReload(t *testing.T) {
	up := harness.StartUpstream(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(file, []byte(envoyFile(1)), 0o600))
	g := harness.Start(t, lifecycleConfig(up.URL, 1000)+fmt.Sprintf("grpc: {listen: \"127.0.0.1:0\", config_files: [%q]}\n", file))
	e := dialEnvoy(t, g)
	st, code := e.check(t, "generic_key", "a")
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(1), st.CurrentLimit.RequestsPerUnit)
	_, code = e.check(t, "generic_key", "a")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, code)

	require.NoError(t, os.WriteFile(file, []byte(envoyFile(5)), 0o600))
	applied, _, err := g.Reload()
	require.NoError(t, err)
	assert.Equal(t, []string{"grpc.config_files"}, applied)
	st, code = e.check(t, "generic_key", "b")
	require.Equal(t, rlsv3.RateLimitResponse_OK, code)
	assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit)

	require.NoError(t, os.WriteFile(file, []byte(envoyFile(5)+"  - key: generic_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"), 0o600))
	a := harness.Do(t, "POST", g.Admin+"/v1/reload", "", "Authorization", "Bearer s3cret")
	assert.Equal(t, 400, a.Status)
	assert.Contains(t, string(a.Body), "edge.yaml")
	assert.Contains(t, string(a.Body), `domain \"edge\"`)
	assert.Contains(t, string(a.Body), `key \"edge.generic_key\"`)
	st, _ = e.check(t, "generic_key", "c")
	assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit, "the running files stay")

	applied, _, err = g.Reload()
	require.Error(t, err)
	assert.Empty(t, applied)
}

// TestEnvoyRLSConfigFilesRefusedAtStart: an invalid file refuses start-up,
// naming the file.
func TestEnvoyRLSConfigFilesRefusedAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(file, []byte("domain: edge\ndescriptors:\n  - value: x\n"), 0o600))
	up := harness.StartUpstream(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(lifecycleConfig(up.URL, 1000)+fmt.Sprintf("grpc: {listen: \"127.0.0.1:0\", config_files: [%q]}\n", file)), 0o600))
	cfg, err := gateway.LoadConfig(path, nil)
	require.NoError(t, err)
	_, err = gateway.New(cfg, gateway.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad.yaml")
	assert.Contains(t, err.Error(), `domain "edge"`)
	assert.Contains(t, err.Error(), "empty key")
}
