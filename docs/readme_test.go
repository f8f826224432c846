package docs_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestReadmeInOrder follows the documentation as a reader does, from the
// README's quick start to the end of the admin API's examples in
// docs/api.md, running each `$ curl` command in order against a gateway on
// config.yaml, and compares what the examples claim: status codes, and in
// JSON answers "allowed", "limit", "field" and "error" (other values, such
// as remaining budgets and times, depend on the clock and are not compared).
func TestReadmeInOrder(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: .ci/run installs it")
	}
	steps := consoleSteps(docSection(t, "README.md", "\n## Quick start\n"))
	require.GreaterOrEqual(t, len(steps), 3, "the quick start's examples")
	steps = append(steps, consoleSteps(docSection(t, "docs/api.md", "\n## Examples\n"))...)
	require.GreaterOrEqual(t, len(steps), 20, "the quick start and the admin API examples")

	conf, err := os.ReadFile("config.yaml")
	require.NoError(t, err)
	up := harness.StartUpstream(t)
	g := harness.Start(t, string(conf), "SENTINEL_UPSTREAMS_API_TARGETS="+up.URL)
	proxy, adm := strings.TrimPrefix(g.URL, "http://"), strings.TrimPrefix(g.Admin, "http://")
	for _, s := range steps {
		cmd := strings.NewReplacer("localhost:8080", proxy, "localhost:9090", adm).Replace(s.cmd)
		out, err := exec.Command("sh", "-c", cmd).Output()
		require.NoError(t, err, "%s", s.cmd)
		got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(s.out) > 0 && strings.HasPrefix(s.out[0], "HTTP/") {
			// curl -si: the status line and the body (the last line); the
			// headers' order and values are not the example's point.
			compareLine(t, s.cmd, s.out[0], got[0])
			compareLine(t, s.cmd, s.out[len(s.out)-1], got[len(got)-1])
			continue
		}
		for i, want := range s.out {
			if i >= len(got) {
				t.Errorf("%s: no line %d, want %q", s.cmd, i+1, want)
				break
			}
			compareLine(t, s.cmd, want, got[i])
		}
	}
}

// docSection is the section of the markdown file path that begins with the
// heading line, up to the next heading of the same or a higher level.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, heading)
	require.GreaterOrEqual(t, start, 0, "%s has no %q", path, strings.TrimSpace(heading))
	level := heading[:strings.Index(heading, " ")+1] // "\n## "
	rest := text[start+len(heading):]
	if end := strings.Index(rest, level); end >= 0 {
		rest = rest[:end]
	}
	return heading + rest
}

type consoleStep struct {
	cmd string
	out []string
}

// consoleSteps reads the `$ ` commands of the console blocks of md and the
// lines each shows as its output.
func consoleSteps(md string) []consoleStep {
	var steps []consoleStep
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case line == "```console":
			in = true
		case line == "```":
			in = false
		case in && strings.HasPrefix(line, "$ "):
			steps = append(steps, consoleStep{cmd: line[2:]})
		case in && len(steps) > 0:
			steps[len(steps)-1].out = append(steps[len(steps)-1].out, line)
		}
	}
	return steps
}

// compareLine compares one shown output line with the one produced: an HTTP
// status line or a bare status code exactly, a JSON answer by the keys that
// do not depend on the clock; other lines (headers, bodies of the upstream,
// metrics) are not compared.
func compareLine(t *testing.T, cmd, want, got string) {
	t.Helper()
	switch {
	case strings.HasPrefix(want, "HTTP/1.1 "), len(want) == 3 && strings.Trim(want, "0123456789") == "":
		assert.Equal(t, want, strings.TrimRight(got, "\r"), cmd)
	case strings.HasPrefix(want, "{") && json.Valid([]byte(want)):
		var w, g map[string]any
		require.NoError(t, json.Unmarshal([]byte(want), &w), cmd)
		require.NoError(t, json.Unmarshal([]byte(got), &g), "%s: %s", cmd, got)
		compareJSON(t, cmd, w, g)
	}
}

func compareJSON(t *testing.T, cmd string, want, got map[string]any) {
	t.Helper()
	for _, k := range []string{"allowed", "limit", "field", "error"} {
		if v, ok := want[k]; ok {
			assert.Equal(t, v, got[k], "%s: %q", cmd, k)
		}
	}
	if w, ok := want["results"].([]any); ok {
		g, _ := got["results"].([]any)
		require.Len(t, g, len(w), cmd)
		for i := range w {
			compareJSON(t, cmd, w[i].(map[string]any), g[i].(map[string]any))
		}
	}
}
