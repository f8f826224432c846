package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The user documentation must keep up with the code: these tests fail when a
// config key, a metric or an alert has no entry, or a link points nowhere.

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestConfigurationDocListsEveryKey(t *testing.T) {
	doc := readDoc(t, "docs/configuration.md")
	containers := map[string]bool{"plans": false, "tenants": true, "routes": true, "rules": true, "upstreams": true}
	var keys []string
	keyWalk{MapName: ".NAME", ListItem: "[]", Visit: func(k configKey) bool {
		if !k.Section {
			keys = append(keys, k.Name)
		}
		return k.Section || k.Entries
	}}.walkType(reflect.TypeOf(Config{}), "")
	for _, key := range keys {
		if containers[key] || key == "adaptive.concurrency.upstreams" {
			continue // documented entry by entry
		}
		assert.Contains(t, doc, "| `"+key+"` |", "docs/configuration.md has no row for %s", key)
	}
}

// metricInCode finds metric names where the code registers them: in a
// backquoted string, up to the labels.
var metricInCode = regexp.MustCompile("`((?:sentinel|rate_limit)_[a-z0-9_]+)[`{]")

func TestMetricsDocListsEveryMetric(t *testing.T) {
	doc := readDoc(t, "docs/metrics.md")
	found := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(path, "loadtest") {
			return err
		}
		for _, m := range metricInCode.FindAllStringSubmatch(readDoc(t, path), -1) {
			found++
			assert.Contains(t, doc, "`"+m[1]+"`", "%s registers %s, which docs/metrics.md does not describe", path, m[1])
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, found, 40, "metric names found in the code")
}

func TestRunbookCoversEveryAlert(t *testing.T) {
	doc := readDoc(t, "docs/runbook.md")
	rules := readDoc(t, "alerts/rate_limiter_alerts.yml")
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(rules, -1)
	require.NotEmpty(t, alerts)
	for _, a := range alerts {
		assert.Contains(t, doc, "\n## "+a[1]+"\n", "docs/runbook.md has no section for %s", a[1])
		assert.Contains(t, rules, "docs/runbook.md#"+strings.ToLower(a[1]), "%s has no runbook_url to its section", a[1])
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// TestDocLinks checks that every relative link of the user documentation
// points to a file of the repository, and that none points outside it.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	files = append(files, "README.md", "loadtest/README.md")
	for _, file := range files {
		text := readDoc(t, file)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join(filepath.Dir(file), target)
			assert.False(t, strings.HasPrefix(path, ".."), "%s links outside the repository: %s", file, target)
			_, err := os.Stat(path)
			assert.NoError(t, err, "%s links to %s, which does not exist", file, target)
		}
		for _, bad := range []string{"../shared", "DESIGN.md"} {
			assert.False(t, strings.Contains(text, bad), "%s refers to %s, outside the repository", file, bad)
		}
	}
}
