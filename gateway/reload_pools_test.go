package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReloadKeepsUnchangedPools: a reload that moves routes between
// upstreams keeps the pool of an upstream whose section did not change
// (its connections, health and breakers), and builds none anew.
func TestReloadKeepsUnchangedPools(t *testing.T) {
	conf := func(prefix string) string {
		return `
upstreams:
  one: {targets: ["http://127.0.0.1:1"]}
  two: {targets: ["http://127.0.0.1:2"]}
routes:
  - {path_prefix: ` + prefix + `, upstream: one}
  - {path_prefix: /, upstream: two}
adaptive: {enabled: false}
`
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf("/one")), 0o600))
	load := func() (*Config, error) { return LoadConfig(path, nil) }
	cfg, err := load()
	require.NoError(t, err)
	g, err := New(cfg, Options{Load: load})
	require.NoError(t, err)
	t.Cleanup(g.close)
	one, two := g.upstreams.Pool("one"), g.upstreams.Pool("two")

	require.NoError(t, os.WriteFile(path, []byte(conf("/uno")), 0o600))
	applied, _, err := g.Reload()
	require.NoError(t, err)
	assert.Equal(t, []string{"routes"}, applied)
	assert.Same(t, one, g.upstreams.Pool("one"), "an unchanged upstream keeps its pool")
	assert.Same(t, two, g.upstreams.Pool("two"), "an unchanged upstream keeps its pool")
}
