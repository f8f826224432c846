package gateway

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/sentinel-gateway/sentinel/internal/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReloadKeysAgreeWithTheDoc: every key a reload can find changed (the
// keys the walker lists, a map or list as one value) is live when the
// package that owns its section says so, and docs/configuration.md's Reload
// table puts it in the same row: one of the live rows, or the last one
// (restart_required). Within the table the most specific pattern wins, as
// the adaptive row's "but the five below" says.
func TestReloadKeysAgreeWithTheDoc(t *testing.T) {
	live, restart := reloadTable(t)
	keys := config.LeafKeys(reflect.TypeFor[Config](), "")
	require.NotEmpty(t, keys)
	for _, key := range keys {
		l, r := longestMatch(key, live), longestMatch(key, restart)
		require.True(t, l > 0 || r > 0, "%s: the Reload table names it in no row", key)
		assert.Equal(t, l > r, isReloadable(key), "%s: live per its package, and per the Reload table", key)
	}
	for key, want := range map[string]bool{
		"limits.ip": true, "routes": true, "upstreams": true, "tenants": true, "rules": true,
		"log.level": true, "log.format": false, "adaptive.weights.cpu": true, "adaptive.enabled": false,
		"server.listen": false, "server.admin_token": false, "identity.api_key_header": false, "plans": false,
		"grpc.config_files": true, "grpc.descriptor_override": true, "grpc.listen": false,
	} {
		assert.Equal(t, want, isReloadable(key), key)
	}
}

// reloadTable reads the key patterns of the Reload section's table: those
// of the rows a reload applies, and those of its last row (restart).
func reloadTable(t *testing.T) (live, restart []string) {
	b, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Reload\n")
	require.True(t, ok, "docs/configuration.md has a Reload section")
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	var rows [][]string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| keys") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		var pats []string
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			pats = append(pats, m[1])
		}
		rows = append(rows, pats)
	}
	require.GreaterOrEqual(t, len(rows), 2)
	for _, r := range rows[:len(rows)-1] {
		live = append(live, r...)
	}
	return live, rows[len(rows)-1]
}

// longestMatch is the length of the longest pattern that matches key (0:
// none). A pattern ending in * matches the keys it prefixes; another
// matches itself and the keys below it.
func longestMatch(key string, patterns []string) int {
	best := 0
	for _, p := range patterns {
		var match bool
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			match = strings.HasPrefix(key, prefix)
		} else {
			match = key == p || strings.HasPrefix(key, p+".") || strings.HasPrefix(key, p+"[")
		}
		if match && len(p) > best {
			best = len(p)
		}
	}
	return best
}
