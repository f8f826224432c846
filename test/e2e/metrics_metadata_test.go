package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/admin"
	"github.com/sentinel-gateway/sentinel/docs"
	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestMetricsMetadata scrapes a started gateway's /metrics and checks that every metric family comes with a non-empty
// # HELP and a # TYPE before its first sample, exactly once, and that
// `promtool check metrics` finds nothing but the accepted findings that
// docs/metrics.md lists.
// metricInCode finds a metric's name in Go source.
var metricInCode = regexp.MustCompile("`((?:sentinel|rate_limit)_[a-z0-9_]+)[`{]")

func TestMetricsMetadata(t *testing.T) {
	up := harness.StartUpstream(t)
	g := harness.Start(t, metadataConfig(up.URL))
	for _, key := range []string{"k-1", "k-1", "k-1", "nobody"} {
		harness.Do(t, "GET", g.URL+"/x", "", "X-API-Key", key)
	}
	dialEnvoy(t, g).check(t, "tenant", "meta")
	harness.Do(t, "GET", g.Admin+"/v1/state", "")
	body := harness.Do(t, "GET", g.Admin+"/metrics", "").Body

	families := checkFamilies(t, string(body))
	for f, typ := range map[string]string{"rate_limit_allowed_total": "counter", "rate_limit_latency_ms": "histogram",
		"sentinel_limit_decision_duration_seconds": "histogram", "sentinel_http_requests_total": "counter",
		"sentinel_rls_request_duration_seconds": "histogram", "sentinel_adaptive_mode": "gauge",
		"sentinel_upstream_target_healthy": "gauge", "go_goroutines": "gauge", "go_cgo_calls_total": "counter",
		"process_io_read_bytes_total": "counter"} {
		assert.Equal(t, typ, families[f], "family %s", f)
	}
	assert.Regexp(t, `(?m)^sentinel_rls_request_duration_seconds_bucket\{le="\+Inf"\} [1-9]`, string(body), "le buckets, which histogram_quantile reads")
	assert.NotContains(t, string(body), "vmrange")
	t.Logf("%d families, each with HELP and TYPE", len(families))

	cmd := exec.Command(harness.Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	// Exit status 3 means lint findings only; anything else is a parse error.
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	accepted := acceptedFindings(t)
	require.NotEmpty(t, accepted)
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		found = append(found, line)
		assert.True(t, accepted[line], "promtool check metrics: %s (not among the accepted findings of docs/metrics.md)", line)
	}
	for line := range accepted {
		assert.Contains(t, found, line, "docs/metrics.md accepts a finding promtool no longer reports")
	}
}

// acceptedFindings are the promtool findings that docs/metrics.md lists
// under "Prometheus conventions", each the first cell of a table row.
func acceptedFindings(t *testing.T) map[string]bool {
	t.Helper()
	doc := harness.ReadFile(t, "docs/metrics.md")
	_, section, ok := strings.Cut(doc, "\n## Prometheus conventions\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(section, -1) {
		out[m[1]] = true
	}
	return out
}

func metadataConfig(upstream string) string {
	return `
server: {admin_listen: "127.0.0.1:0"}
upstreams:
  api: {targets: ["` + upstream + `"], health_check: {path: /healthz, interval: 1s}}
routes:
  - {path_prefix: /, upstream: api, resource: default}
tenants:
  - {id: meta, plan: FREE, api_keys: [k-1]}
limits: {tenant: 2, ip: 100}
grpc: {listen: "127.0.0.1:0"}
`
}

var (
	metaLine   = regexp.MustCompile(`^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (\S+))?`)
	familyPart = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// checkFamilies reads a Prometheus text exposition and fails for every
// sample whose family has not had both HELP and TYPE before it, and for every
// family described twice. It returns the families and their types.
func checkFamilies(t *testing.T, text string) map[string]string {
	t.Helper()
	help := map[string]bool{}
	types := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if m := metaLine.FindStringSubmatch(line); m != nil {
			seen := help[m[2]]
			if m[1] == "TYPE" {
				_, seen = types[m[2]]
				types[m[2]] = m[3]
			}
			if m[1] == "HELP" {
				assert.NotEmpty(t, m[3], "# HELP %s has no text", m[2])
			}
			help[m[2]] = help[m[2]] || m[1] == "HELP"
			assert.False(t, seen, "second # %s for %s", m[1], m[2])
			continue
		}
		m := harness.SampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		family := m[1]
		if _, ok := types[family]; !ok {
			family = familyPart.ReplaceAllString(family, "")
		}
		if !help[family] || types[family] == "" {
			t.Errorf("sample %q: family %s has no # HELP or # TYPE before it", line, family)
		}
	}
	return types
}

// TestEveryMetricHasHelp: every family the code registers, exposed in the
// test above or not (Redis-only, WebSocket, pipeline families), gets a help
// text from its row of docs/metrics.md.
func TestEveryMetricHasHelp(t *testing.T) {
	names := map[string]bool{}
	root := harness.Root(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		path, _ = filepath.Rel(root, path)
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(path, "loadtest") {
			return err
		}
		for _, m := range metricInCode.FindAllStringSubmatch(harness.ReadFile(t, filepath.ToSlash(path)), -1) {
			names[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(names), 40)
	for name := range names {
		assert.NotEmpty(t, admin.MetricsHelp(docs.Metrics)[name], "%s has no help text: its row of docs/metrics.md is missing or does not read as | `name` | type | labels | meaning |", name)
	}
}
