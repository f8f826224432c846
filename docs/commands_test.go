package docs_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/gateway"
	"github.com/sentinel-gateway/sentinel/test/harness"
)

// dockerRun finds the image and the published ports of a `docker run`
// command of the documentation: each -p flag's container port (the last
// number of host:container or ip:host:container).
var (
	dockerRun    = regexp.MustCompile("docker run ([^`\n]*?)(sentinel:[A-Za-z0-9._-]+)")
	publishFlag  = regexp.MustCompile(`-p (?:[0-9.]+:)?[0-9]+:([0-9]+)\b`)
	makeTag      = regexp.MustCompile(`-t (sentinel:[^ ]+)`)
	composeImage = regexp.MustCompile(`image: (sentinel:[A-Za-z0-9._-]+)`)
	listenPort   = regexp.MustCompile(`(?m)^\s*(?:admin_)?listen: "[^"]*:([0-9]+)"`)
)

// TestDockerRunNamesAnImageMakeBuilds: every `docker run` of the gateway's
// image in README.md and docs/, and the image deploy/compose.yaml names,
// is a tag `make docker` builds, and each docker run publishes the ports the
// image's configuration (deploy/sentinel.yaml) listens on.
func TestDockerRunNamesAnImageMakeBuilds(t *testing.T) {
	var built []string
	for _, m := range makeTag.FindAllStringSubmatch(makeTarget(t, "docker"), -1) {
		built = append(built, m[1])
	}
	require.NotEmpty(t, built, "make docker tags no sentinel image")
	var ports []string
	for _, m := range listenPort.FindAllStringSubmatch(readDoc(t, "deploy/sentinel.yaml"), -1) {
		ports = append(ports, m[1])
	}
	require.Len(t, ports, 2, "deploy/sentinel.yaml's listen and admin_listen")
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	runs := 0
	for _, path := range append(docs, "README.md") {
		for _, m := range dockerRun.FindAllStringSubmatch(readDoc(t, path), -1) {
			runs++
			assert.Contains(t, built, m[2], "%s runs %s, which `make docker` does not build (it tags %v)", path, m[2], built)
			var published []string
			for _, p := range publishFlag.FindAllStringSubmatch(m[1], -1) {
				published = append(published, p[1])
			}
			for _, port := range ports {
				assert.True(t, slices.Contains(published, port), "%s: docker run publishes %v, not the image's port %s: %s", path, published, port, m[0])
			}
		}
	}
	assert.Positive(t, runs, "the docs show how to run the image")
	for _, m := range composeImage.FindAllStringSubmatch(readDoc(t, "deploy/compose.yaml"), -1) {
		assert.Contains(t, built, m[1], "deploy/compose.yaml names %s, which `make docker` does not build", m[1])
	}
}

// makeTarget is the recipe of the Makefile's target name: its lines up to
// the next line that does not start with a tab.
func makeTarget(t *testing.T, name string) string {
	t.Helper()
	text := readDoc(t, "Makefile")
	start := strings.Index(text, "\n"+name+":")
	require.GreaterOrEqual(t, start, 0, "the Makefile has no target %s", name)
	var recipe []string
	for _, line := range strings.Split(text[start+1:], "\n")[1:] {
		if !strings.HasPrefix(line, "\t") {
			break
		}
		recipe = append(recipe, line)
	}
	return strings.Join(recipe, "\n")
}

// TestResetExamplesRun runs the examples of docs/api.md's "Resetting a
// counter" section as written, with the admin token in $TOKEN, against a
// gateway on config.yaml with that token, the rule and the policy the
// examples name, and compares each answer whole: none depends on the clock.
func TestResetExamplesRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: .ci/run installs it")
	}
	steps := consoleSteps(docSection(t, "docs/api.md", "\n## Resetting a counter\n"))
	require.GreaterOrEqual(t, len(steps), 3, "the reset examples")
	conf := readDoc(t, "config.yaml")
	require.Contains(t, conf, "\npolicies:\n", "config.yaml's policies, which the example's joins")
	conf = strings.Replace(conf, "\npolicies:\n", `
policies:
  - name: per-key-region
    key: [api_key, "query:region"]
    limits: [{limit: 100, window: 1s}, {limit: 10000, period: day}]
`, 1)
	const token = "reset-examples-token"
	up := harness.StartUpstream(t)
	g := harness.Start(t, conf, "SENTINEL_UPSTREAMS_API_TARGETS="+up.URL, "SENTINEL_SERVER_ADMIN_TOKEN="+token)
	put := harness.Do(t, "PUT", g.Admin+"/v1/rules/acme/search", `{"algorithm":"sliding_window","limit":100,"window":"1m"}`,
		"Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
	adm := strings.TrimPrefix(g.Admin, "http://")
	for _, s := range steps {
		cmd := exec.Command("sh", "-c", strings.ReplaceAll(s.cmd, "localhost:9090", adm))
		cmd.Env = append(os.Environ(), "TOKEN="+token)
		out, err := cmd.Output()
		require.NoError(t, err, "%s", s.cmd)
		require.Len(t, s.out, 1, "%s: one line of output shown", s.cmd)
		var want, got any
		require.NoError(t, json.Unmarshal([]byte(s.out[0]), &want), s.cmd)
		require.NoError(t, json.Unmarshal(out, &got), "%s: %s", s.cmd, out)
		assert.Equal(t, want, got, s.cmd)
	}
}

// TestCheckExampleRuns runs the `sentinel -check` examples of
// docs/configuration.md as main does (the configuration loaded from the
// file and the environment the command names), on the files the examples
// show with `cat` (or the repository's), and compares every line printed.
func TestCheckExampleRuns(t *testing.T) {
	dir := t.TempDir()
	checked := 0
	for _, s := range consoleSteps(readDoc(t, "docs/configuration.md")) {
		fields := strings.Fields(s.cmd)
		if fields[0] == "cat" && len(fields) == 2 {
			require.NoError(t, os.WriteFile(filepath.Join(dir, fields[1]), []byte(strings.Join(s.out, "\n")+"\n"), 0o600))
			continue
		}
		i := slices.Index(fields, "sentinel")
		if i < 0 || !slices.Contains(fields, "-check") {
			continue
		}
		env := fields[:i] // VAR=value assignments before the command
		file := fields[slices.Index(fields, "-config")+1]
		if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
			file = filepath.Join(dir, file) // shown above; otherwise the repository's
		}
		got := "config OK"
		if _, err := gateway.LoadConfig(file, env); err != nil {
			got = "sentinel: invalid configuration:\n" + err.Error()
		}
		assert.Equal(t, s.out, strings.Split(got, "\n"), s.cmd)
		checked++
	}
	assert.Positive(t, checked, "docs/configuration.md shows a -check example")
}

// TestReadmeFiguresAgreeWithPerformance: the README's "When not to use it"
// and its Performance section give the proxy's requests per second against
// nginx's and the bare proxy's as docs/performance.md measured them (its
// row of the default configuration: the medians of the ratios).
func TestReadmeFiguresAgreeWithPerformance(t *testing.T) {
	var row []string
	for _, line := range strings.Split(readDoc(t, "docs/performance.md"), "\n") {
		if strings.HasPrefix(line, "| Sentinel, proxy, default (") {
			row = strings.Split(line, "|")
			break
		}
	}
	require.Len(t, row, 22, "docs/performance.md's row of the default proxy")
	ratio := func(cell string) string { return strings.Fields(cell)[0] } // "0.77× (0.59–0.86)"
	vsNginx, vsFloor := ratio(row[13]), ratio(row[18])
	for _, heading := range []string{"\n### When not to use it\n", "\n## Performance\n"} {
		section := docSection(t, "README.md", heading)
		if end := strings.Index(section[len(heading):], "\n#"); end >= 0 { // up to the next heading of any level
			section = section[:len(heading)+end]
		}
		assert.Contains(t, section, vsNginx, "README%s: not nginx's figure %s", strings.TrimSpace(heading), vsNginx)
		assert.Contains(t, section, vsFloor, "README%s: not the bare proxy's figure %s", strings.TrimSpace(heading), vsFloor)
	}
}
