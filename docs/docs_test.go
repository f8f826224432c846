package docs_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/sentinel-gateway/sentinel/internal/config"
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
	containers := map[string]bool{"plans": false, "tenants": true, "routes": true, "rules": true, "upstreams": true, "policies": true}
	var keys []string
	config.KeyWalk{MapName: ".NAME", ListItem: "[]", Visit: func(k config.Key) bool {
		if !k.Section {
			keys = append(keys, k.Name)
		}
		return k.Section || k.Entries
	}}.WalkType(reflect.TypeOf(gateway.Config{}), "")
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

// mdLink matches a markdown link's target: a path, an #anchor, or both.
var mdLink = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// mdHeading matches an ATX heading outside code blocks.
var mdHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// TestDocLinks checks that every relative link of the user documentation
// points to a file of the repository, that none points outside it, and that
// an #anchor into a markdown file names one of its headings.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	files = append(files, "README.md", "loadtest/README.md")
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		text := readDoc(t, file)
		for _, m := range mdLink.FindAllStringSubmatch(withoutCodeBlocks(text), -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
			}
			assert.False(t, strings.HasPrefix(path, ".."), "%s links outside the repository: %s", file, target)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", file, target)
				continue
			}
			checked++
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if anchors[path] == nil {
				anchors[path] = headingAnchors(readDoc(t, path))
			}
			assert.True(t, anchors[path][anchor], "%s links to %s#%s, which has no such heading", file, path, anchor)
		}
		for _, bad := range []string{"../shared", "DESIGN.md"} {
			assert.False(t, strings.Contains(text, bad), "%s refers to %s, outside the repository", file, bad)
		}
	}
	assert.Greater(t, checked, 50, "links checked")
}

// withoutCodeBlocks blanks the fenced code blocks of md, whose lines are
// neither links nor headings.
func withoutCodeBlocks(md string) string {
	lines := strings.Split(md, "\n")
	in := false
	for i, line := range lines {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if fence || in {
			lines[i] = ""
		}
		if fence {
			in = !in
		}
	}
	return strings.Join(lines, "\n")
}

// headingAnchors gives the anchors GitHub makes of md's headings: the text
// in lower case, spaces as '-', punctuation dropped, and "-1", "-2", ... on
// repeats.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(withoutCodeBlocks(md), "\n") {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := githubAnchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start":                                 "quick-start",
		"Protocols: TLS, WebSocket, HTTP/2":           "protocols-tls-websocket-http2",
		"Who failed: every answer is classified once": "who-failed-every-answer-is-classified-once",
		"plans, tenants":                              "plans-tenants",
		"`internal/deadline`":                         "internaldeadline",
		"Limits that hold across pods: leases":        "limits-that-hold-across-pods-leases",
		"adaptive.concurrency (per upstream)":         "adaptiveconcurrency-per-upstream",
	} {
		assert.Equal(t, want, githubAnchor(heading), heading)
	}
	a := headingAnchors("# A\n```\n# not a heading\n```\n## A\n### B ###\n")
	assert.Equal(t, map[string]bool{"a": true, "a-1": true, "b": true}, a)
}
